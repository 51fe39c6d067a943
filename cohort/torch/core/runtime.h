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

#include <memory>
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

// The job's store of init() (groups built on the world take namespaces in
// it); ConfigError when not initialized.
std::shared_ptr<rendezvous::Store> world_store();
// A new communicator over all of init()'s ranks, of the world's backend,
// rendezvousing under `name` in the world store. Collective; every rank
// passes the same name, used once. For code that splits the world (Mesh):
// the world engine's communicator belongs to the engine's thread.
std::unique_ptr<comm::Communicator> create_world_communicator(const std::string& name);

// The engine calls use when their options name none (see the file comment).
engine::Engine& current_engine();
// `explicit_engine` when non-null, else current_engine().
engine::Engine& resolve_engine(engine::Engine* explicit_engine);

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
