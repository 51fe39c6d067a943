// Engine: named asynchronous collectives over one communicator, run by one
// background thread (Horovod's core, for cohort).
//
//   auto engine = std::make_shared<engine::Engine>(comm, store_namespace);
//   Handle h = engine->allreduce_async("grad/fc1.weight", grad, {.op = ReduceOp::avg});
//   ...
//   h.wait();  // rethrows the op's error
//
// Any thread submits; names identify ops across ranks, which may submit in
// different orders and from different threads. The engine thread runs
// cycles: collect what was submitted, agree with the other ranks on what is
// ready everywhere (negotiation.h: by name the first time, by one response-
// cache bit afterwards), run it (executor.h: small allreduces and broadcasts
// fused up to COHORT_FUSION_THRESHOLD), complete the handles. An idle group
// sleeps on a doorbell in the store (doorbell.h) and wakes on new work.
//
// Contracts:
// - Construction is collective over the communicator's ranks, each passing
//   a Store namespace for this engine (the same one on every rank; distinct
//   engines need distinct namespaces, e.g. PrefixStore("engine/dp", store)).
//   The engine uses the communicator from its own thread only: do not call
//   it elsewhere while the engine lives.
// - A name may not be submitted again on a rank before its previous op has
//   completed there. Buffers must stay valid and untouched until the handle
//   completes. Argument errors (sizes, dtypes, a name in flight) throw at
//   submission; everything else is reported through the handle.
// - Ranks that disagree on an op (kind, dtype, count or shape, reduce op,
//   root, scales) get a MismatchError on every rank that names the op, the
//   ranks and what each submitted; the engine carries on.
// - Failure: when a rank's engine fails (communicator error, abort(), stall
//   shutdown) it records the root cause in the store ("error"); every rank's
//   pending and later handles fail with an error of the same kind carrying
//   that cause. The engine does not recover; create a new one.
// - Shutdown (shutdown() or the destructor) stops every rank's engine at the
//   same cycle: ops that were ready everywhere run, the rest fail with a
//   PeerShutDownError naming the rank that shut down. Destroying an Engine during
//   exception unwinding aborts it instead, so the other ranks learn that
//   this rank failed.
// - join(): a rank that has run out of work calls join(); until every rank
//   has joined, it takes part in every op the others run: allreduce and
//   reduce_scatter get its identity (0 for sum and avg, 1 for product, +inf /
//   the largest integer for min, -inf / the lowest for max) and avg divides
//   by the number of ranks that submitted the op; allgather gets no rows
//   from it; alltoall gets zeros; a broadcast whose root has joined fails on
//   every rank. join() returns the last rank to join (the highest rank among
//   those that joined in the same cycle). A rank may not submit while joined.
// - Ordered submissions (submit_ordered_*) skip name matching: each rank's
//   n-th ordered op runs with every other rank's n-th. Their signatures
//   (kind, dtype, count, op, root, scales, shape) are compared in the cycle
//   records before anything runs; a difference fails that op on every rank
//   with a MismatchError.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/common/error.h"
#include "cohort/engine/handle.h"
#include "cohort/engine/options.h"
#include "cohort/engine/stats.h"
#include "cohort/rendezvous/store.h"

namespace cohort::engine {

// The error of ops that another rank's shutdown() left without a partner (the
// file comment's "Shutdown"): rank() is the rank that shut down. Wrappers
// that count steps turn it into a step-count MismatchError.
class PeerShutDownError : public PeerLostError {
 public:
  using PeerLostError::PeerLostError;
};

class Engine {
 public:
  Engine(std::shared_ptr<comm::Communicator> comm, std::shared_ptr<rendezvous::Store> store,
         EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const;
  int size() const;
  const EngineOptions& options() const;  // resolved

  // out = op over ranks of in (prescaled), postscaled; in == out is in place.
  Handle allreduce_async(std::string name, BufferView in, BufferView out, AllreduceOptions options = {});
  Handle allreduce_async(std::string name, BufferView inout, AllreduceOptions options = {}) {
    return allreduce_async(std::move(name), inout, inout, std::move(options));
  }
  // Concatenation over ranks of `in` (counts may differ per rank, in
  // multiples of row_elements); see Handle::output() and counts().
  Handle allgather_async(std::string name, BufferView in, AllgatherOptions options = {});
  // Every rank's `buffer` becomes root's.
  Handle broadcast_async(std::string name, BufferView buffer, int root, BroadcastOptions options = {});
  // Block r of the reduction of every rank's `in` lands in rank r's `out`;
  // in.count == size() * out.count.
  Handle reduce_scatter_async(std::string name, BufferView in, BufferView out, ReduceScatterOptions options = {});
  // Block p of `in` goes to rank p, landing as block rank() of p's `out`.
  Handle alltoall_async(std::string name, BufferView in, BufferView out, AlltoallOptions options = {});
  // Completes when every rank has submitted it. An empty name means
  // "barrier.<k>" for this rank's k-th unnamed barrier.
  Handle barrier_async(std::string name = {});

  // Ordered submissions: no name; every rank submits the same sequence.
  Handle submit_ordered_allreduce(BufferView in, BufferView out, AllreduceOptions options = {});
  Handle submit_ordered_allgather(BufferView in, AllgatherOptions options = {});
  Handle submit_ordered_broadcast(BufferView buffer, int root, BroadcastOptions options = {});
  Handle submit_ordered_reduce_scatter(BufferView in, BufferView out, ReduceScatterOptions options = {});
  Handle submit_ordered_alltoall(BufferView in, BufferView out, AlltoallOptions options = {});

  // See the file comment. join() blocks; join_async() returns a handle whose
  // last_joined_rank() is the result.
  Handle join_async();
  int join();

  // Stops the engine on every rank (see the file comment); idempotent.
  void shutdown();
  // Fails this engine and every rank's with `reason` as the root cause.
  void abort(const std::string& reason);

  EngineStats stats() const;

  // Autotuning from the caller's training steps (autotune.h), for a wrapper
  // with a knob of its own: DDP's bucket cap joins the engine's fusion
  // threshold and cycle time in one search.
  // - autotunes(): whether this rank's engine was configured to
  //   (COHORT_AUTOTUNE); callers agree on rank 0's.
  // - tune_step(driver, bucket_bytes): on rank 0, at each training step's
  //   start. The first call makes `driver` (the caller's identity) the one
  //   whose steps the tuner takes, instead of the engine's own step clock
  //   (an op's recurrence), and starts the search again with bucket caps
  //   (default_bucket_grid(), `bucket_bytes` the start); each later call
  //   ends a step. Returns the cap for the step that starts and whether the
  //   search goes on (false once converged: the caller stops calling).
  //   nullopt on other ranks, where the engine does not tune, where its own
  //   search converged before the first call, and for any other driver.
  // - end_tune_steps(driver): the driver goes (a destructor): a search it
  //   left unfinished stops at the configured settings.
  struct StepTuning {
    int64_t bucket_bytes = 0;
    bool searching = false;
  };
  bool autotunes() const;
  std::optional<StepTuning> tune_step(const void* driver, int64_t bucket_bytes);
  void end_tune_steps(const void* driver);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::engine
