// The engine that cohort's tensor calls use when none is named.
//
// A training program calls init() once: it discovers the job from the
// launcher's variables (cohortrun, torchrun, mpirun, srun, or none: one
// process), builds the world communicator and one Engine over it, and makes
// that engine the process's default:
//
//   cohort::init();
//   auto sum = cohort::allreduce(t);  // on the world engine
//   ...
//   cohort::shutdown();               // optional: also runs at exit
//
// Code that owns its engines (tests running ranks as threads, several groups)
// binds one to the current thread with EngineScope, or passes it in an op's
// options. Resolution order for every call: the options' engine, else this
// thread's EngineScope, else the engine of init(); none is a ConfigError.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/engine/engine.h"
#include "cohort/engine/options.h"
#include "cohort/rendezvous/store.h"

namespace cohort {

struct InitOptions {
  engine::EngineOptions engine;  // label defaults to "world"
};

// Collective over the job's ranks; throws ConfigError when called twice
// without shutdown() in between, or when the launcher's variables are bad.
void init(InitOptions options = {});
// Destroys the world engine (collective: every rank's engine stops at the
// same cycle), then its communicator and store. No-op when not initialized.
void shutdown();
bool initialized();

// Of the world started by init(); ConfigError when not initialized.
int rank();
int size();
int local_rank();
int local_size();
// The world communicator's backend ("shm", "gloo", "mpi", ...).
std::string world_backend();

// The job's store of init() (groups built on the world take namespaces in
// it); ConfigError when not initialized.
std::shared_ptr<rendezvous::Store> world_store();
// A new communicator over all of init()'s ranks, of the world's backend,
// rendezvousing under `name` in the world store. Collective; every rank
// passes the same name, used once. For code that splits the world (Mesh):
// the world engine's communicator belongs to the engine's thread.
std::unique_ptr<comm::Communicator> create_world_communicator(const std::string& name);

// ---- elastic jobs (cohortrun --min-np) ----------------------------------------
// The world is one membership epoch of the job (rendezvous/membership.h):
// rank() and size() are the epoch's, and reform() moves to the next.

// Whether this process belongs to an elastic job.
bool elastic();
// The membership epoch of the current world; -1 outside elastic jobs.
int64_t membership_epoch();
// Whether this process joins an elastic job in progress (a replacement of
// a failed one, or a rank on a host discovery added) and has not yet taken
// the members' state: true until its first ElasticState::sync(), which
// calls finish_joining().
bool elastic_joining();
void finish_joining();
// Whether the launcher published an epoch after the world's: one store
// read, not collective (ElasticState::commit() agrees on it).
bool membership_changed();
// How often an elastic job's engines wake while ops wait (their
// EngineOptions::liveness_probe), so that a member that died before
// submitting an op is noticed within this, not the default 5 s. It costs one
// negotiation per period only while ops wait. init()'s engine uses it; so
// must an engine a strategy builds over part of an elastic world.
inline constexpr std::chrono::milliseconds kElasticLivenessProbe{100};
// Why the current world was abandoned (the launcher announced a member of
// its epoch lost: none of its collectives can complete), or nullopt (none
// was, or the job is not elastic). One store read, not collective: for a
// wait on something other than the world's collectives (a parameter
// server's reply), which must give up as a collective would.
std::optional<std::string> world_abandoned();
// The check behind world_abandoned(), bound to the current world (its store
// and epoch) and taking no lock: for an engine's thread
// (EngineOptions::abandoned), which reform() waits for while it holds the
// runtime's lock. Empty when the job is not elastic.
std::function<std::optional<std::string>()> world_abandonment_check();
// Replaces the world engine and communicator by those of the next epoch
// that includes this process, waiting for the launcher to publish it
// (after a peer was lost, or when membership_changed()). Collective over
// the new epoch's members. EngineRef holders of the old engine then raise
// ConfigError: strategies and wrappers built on it must be built again.
// Throws comm::ElasticLeave when the new epoch leaves this process out,
// rendezvous::MembershipEnded when the launcher ended the job; after any
// throw the process has no world (as after shutdown()). Holds the runtime's
// lock while it waits: other threads' rank(), size() and engine look-ups
// wait for the new world.
void reform();

// The engine calls use when their options name none (see the file comment).
engine::Engine& current_engine();
// `explicit_engine` when non-null, else current_engine().
engine::Engine& resolve_engine(engine::Engine* explicit_engine);

// A long-lived object's hold on its engine (DistributedOptimizer,
// DistributedDataParallel, the strategies keep one). Resolved once, in the
// order of resolve_engine(). The engine of init() is held weakly: once
// shutdown() has run, every use raises a ConfigError naming the holder instead
// of reaching a destroyed engine, and a use in progress keeps the engine
// object alive until it returns (its ops then fail with the engine's "shut
// down" error). An engine passed in options or bound with EngineScope belongs
// to the caller, who keeps it alive while the holder uses it.
class EngineRef {
 public:
  EngineRef() = default;
  // `holder` names the object in errors ("DistributedOptimizer").
  EngineRef(engine::Engine* explicit_engine, std::string holder);

  // The engine for one use, alive until the pointer is dropped; never null.
  std::shared_ptr<engine::Engine> lock() const;
  // For options that take a raw engine (a wrapper building another): the
  // same engine, checked alive now; the callee resolves it to the same hold.
  engine::Engine* get() const { return lock().get(); }
  // Of the engine at resolution (valid after shutdown()).
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  engine::Engine* borrowed_ = nullptr;
  std::weak_ptr<engine::Engine> world_;
  std::string holder_;
  int rank_ = 0, size_ = 1;
};

// Binds `engine` as this thread's engine until destroyed (scopes nest).
class EngineScope {
 public:
  explicit EngineScope(engine::Engine& engine);
  ~EngineScope();
  EngineScope(const EngineScope&) = delete;
  EngineScope& operator=(const EngineScope&) = delete;

 private:
  engine::Engine* previous_;
};

}  // namespace cohort
