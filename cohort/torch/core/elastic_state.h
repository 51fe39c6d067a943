// ElasticState: what the processes of an elastic job (cohortrun --min-np)
// keep in memory to go on after a membership change, as Horovod's
// hvd.elastic.State, and run_elastic(), the loop that uses it:
//
//   cohort::init();
//   cohort::ElasticState state(model, optimizer);
//   int64_t& step = state.counter("step");
//   cohort::run_elastic(state, [&] {
//     while (step < steps) {
//       ... forward, backward, allreduce gradients, optimizer.step() ...
//       ++step;          // the commit records the step as done
//       state.commit();  // cheap: a copy in memory, and one tiny collective
//     }
//   });
//
// What a commit holds: the model's parameters and buffers, the optimizer's
// state and every param group's learning rate, the counters (epoch, batch,
// a data cursor: whatever says where training is), tracked tensors, tallies'
// totals and tracked values (bytes the program saves and loads: fit()'s
// position, history and callbacks), copied into this process's memory (into
// the last commit's tensors: no allocation; the state of an optimizer that
// is not per element, as LBFGS, goes through its archive). The state is
// replicated (every member holds the same), so no death loses it while one
// member lives. A model and optimizer split over the members (ZeRO) are
// committed by their strategy's ElasticShards instead (shard()): each
// member's part and a copy of another member's. fit() (cohort/torch/fit) runs itself this way when the job
// is elastic.
//
// Membership changes (run_elastic):
//  - a member is lost (PeerLostError out of any collective): every survivor
//    abandons the step, forms the next epoch's world (cohort::reform()),
//    and the members agree on the newest commit any of them holds (a member
//    may have committed a step whose collectives others did not finish) and
//    take it: work since that commit is redone, a committed step is never
//    lost or applied twice;
//  - the launcher admits a member (a replacement): at the next commit every
//    member sees it (commit() agrees on it collectively and throws
//    MembershipChanged), the world is formed again with the newcomer, and
//    it receives the state before its first step (no rollback).
// Work that depends on the world's size (the batch each rank takes) must
// read cohort::size() each step, from the committed counters; a loop whose
// global batch grows with the world asks for linear learning-rate scaling
// (scale_learning_rate_with_world()).
//
// A member that dies while the others form a new world (in the
// communicator's rendezvous) makes the launcher publish a later epoch, and
// the others move on to it (rendezvous/epoch_store.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cohort/common/error.h"
#include "cohort/engine/engine.h"

namespace cohort {

// State split over the members, which no member holds whole (ZeRO's
// blocks): ElasticState::shard() commits and restores it through this. The
// implementation (checkpoint/elastic_shards.h) keeps each member's part of
// a commit and a copy of another member's, so that no single death loses a
// part of the last commit.
class ElasticShards {
 public:
  virtual ~ElasticShards() = default;
  // Collective: this member's part of the state, kept as commit `serial`
  // (the two newest are kept: a member lost during a commit leaves the
  // others holding both).
  virtual void commit(int64_t serial) = 0;
  // Collective over the current world, new members included: the newest
  // commit whose parts the members hold together, loaded into the state
  // and kept so that no single death loses it before the next commits;
  // returns its serial. When no
  // member holds any commit, the state stays as it is and is kept as commit
  // `serial_if_none`, which is returned. Error when a commit's parts were
  // lost (two members that held the same part died together).
  virtual int64_t restore(int64_t serial_if_none) = 0;
};

// Thrown by ElasticState::commit() on every member at once when the
// launcher published a new membership.
class MembershipChanged : public Error {
 public:
  using Error::Error;
};

class ElasticState {
 public:
  // `model` and `optimizer` are kept by reference and must outlive the state.
  ElasticState(torch::nn::Module& model, torch::optim::Optimizer& optimizer);

  // A named int64 kept with the state (0 when first used); the reference
  // stays valid, and restore() and sync() write through it.
  int64_t& counter(const std::string& name);
  // A tensor kept with the state: commit() copies its values, restore()
  // and sync() write them back in place (same shape and dtype).
  void track(const std::string& name, at::Tensor tensor);
  // Bytes kept with the state: commit() stores save()'s, restore() and
  // sync() pass the committed ones to load() (any length; a new member gets
  // the root's). Both run on the calling thread.
  void track(const std::string& name, std::function<std::string()> save,
             std::function<void(const std::string&)> load);
  // A float64 sum that every member adds its own share to (fit()'s metric
  // sums): `pending` holds this member's additions since the last commit,
  // `total` the committed sum over every member. commit() adds all
  // members' pending values into every member's total (inside its one
  // collective) and zeros pending; restore() and sync() zero pending (that
  // work is redone) and put back the committed total. Same shapes on every
  // member; both tensors are written in place. Outside an elastic job
  // commit() makes no collective and the total is this process's own.
  void tally(const std::string& name, at::Tensor pending, at::Tensor total);

  // Agrees with the other members whether the membership changed and sums
  // the tallies (one collective), then copies the state into memory; if the
  // membership changed, MembershipChanged (the commit is made). A member
  // lost during the collective leaves the commit before in force.
  void commit();
  // Back to the last commit (the state at construction before any).
  void restore();
  // Collective over the current world: every member takes the newest
  // commit of any (the lowest rank's among equals; members that all hold
  // the same committed step keep their own, identical by replication;
  // before any commit, rank 0's), new members included.
  void sync();
  // The model and optimizer are split over the members (ZeRO): commit(),
  // restore() and sync() leave them to `shards` (which must outlive the
  // state) and keep the rest (counters, tracked tensors and values,
  // tallies) as usual; the model and optimizer given to the constructor are
  // not used. Before the first commit. Not with learning-rate scaling.
  void shard(ElasticShards& shards);
  // The members' collectives run on the engine `group` returns, when not
  // null: the processes that train, when the world holds others too (the
  // parameter_server strategy's servers, which keep no training state), and
  // the members' ranks and size are then its. Asked at each commit and sync
  // (a new world brings a new group). Unset or null: the world's engine.
  void set_group(std::function<engine::Engine*()> group) { group_ = std::move(group); }
  // Commits so far in the state being trained (restored with it).
  int64_t commits() const { return serial_; }
  // Linear scaling (Goyal et al. 2017), for loops whose global batch is a
  // fixed batch per member: restore() and sync() set every param group's
  // learning rate to the committed one times size() over the world's size
  // at that commit, so the rate follows the members (a schedule's changes
  // between commits are the program's).
  void scale_learning_rate_with_world(bool on = true);

  ElasticState(const ElasticState&) = delete;
  ElasticState& operator=(const ElasticState&) = delete;
  ~ElasticState();

 private:
  struct Snapshot;
  engine::Engine* group() const { return group_ ? group_() : nullptr; }
  int member_rank() const;  // in the group, else the world (0 outside a job)
  int members() const;      // the group's size, else the world's (1 outside a job)
  void take(Snapshot& s) const;  // the live state into `s`
  void put(const Snapshot& s);   // `s` into the live state
  void put_kept(const Snapshot& s);  // its counters, tracked tensors and values
  void receive(int root);        // root's commit into this one (collective)
  // Collective: every member takes the commit of the lowest rank among
  // those with the largest `key`, when the members' keys differ or
  // `always`; returns the largest key.
  int64_t receive_from_largest(int64_t key, bool always);
  void zero_pending();

  struct Value {  // a tracked value: bytes in and out
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  struct Tally {
    at::Tensor pending, total;
  };

  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  const bool per_element_;  // the optimizer's state is ElementState (element_state.h)
  bool scale_lr_ = false;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, at::Tensor> tracked_;  // tallies' totals too
  std::map<std::string, Value> values_;
  std::map<std::string, Tally> tallies_;
  std::unique_ptr<Snapshot> commit_;  // null before the first commit or sync
  int64_t serial_ = 0;  // commits made in the state's history
  ElasticShards* shards_ = nullptr;
  std::function<engine::Engine*()> group_;
  std::unique_ptr<Snapshot> previous_;  // with shards: the commit before commit_
  void sync_sharded();
};

// Runs `train` until it returns, through membership changes (see the file
// comment): before each attempt, state.sync() (which puts the newest
// commit any member holds into the live state: after a lost member, the
// restore); after a lost member or MembershipChanged, cohort::reform(),
// then `rejoin` (which sees the live state, not yet rolled back: it must
// not depend on values the sync puts back). `rejoin` (optional)
// builds again what the program built over the old world (a strategy:
// Strategy::rejoin()); a new member runs its own construction instead, so
// the two must make the same collectives. A member lost during `rejoin` or
// sync() is recovered from as during `train`. Outside an elastic job it is
// state.sync() and train().
// A process that the new membership leaves out returns false
// (comm::ElasticLeave is caught), otherwise true once `train` returned;
// rendezvous::MembershipEnded (the launcher ended the job) propagates.
bool run_elastic(ElasticState& state, const std::function<void()>& train,
                 const std::function<void()>& rejoin = {});

}  // namespace cohort
