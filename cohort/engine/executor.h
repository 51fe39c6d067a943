// Executor: runs one cycle's ready ops on the communicator, fusing small ones
// (see fusion_buffer.h), and records per-op phase times for the timeline.
//
// Every rank calls run() with the same ReadyOp list (the negotiated
// decision), so every rank makes the same collective calls. A rank that holds
// no request for an op (it is inside join()) contributes the op's identity
// (allreduce, reduce_scatter), nothing (allgather: zero elements), zeros
// (alltoall), or receives into scratch memory (broadcast); a broadcast whose
// root holds no request fails on every rank instead of running.
//
// Failures of the communicator propagate (the engine fails as a whole);
// failures of one op on one rank (an allgather allocator that throws) are
// stored in its Work and the rank still takes part in the collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/engine/fusion_buffer.h"
#include "cohort/engine/negotiation.h"
#include "cohort/engine/request.h"

namespace cohort::engine {

struct Work {
  const ReadyOp* op = nullptr;
  Request* local = nullptr;   // this rank's request, or nullptr
  std::exception_ptr error;   // this op failed (on this rank)
  bool fused = false;
  Clock::time_point start{}, copied_in{}, reduced{}, end{};
};

struct ExecutorCounters {
  uint64_t fused_ops = 0;
  uint64_t fusion_groups = 0;
  uint64_t bytes = 0;
};

class Executor {
 public:
  Executor(comm::Communicator& comm, size_t fusion_threshold_bytes);

  // Runs work[i] for every i (work[i].op points into the same ready list, in
  // order). After each group, `done` gets that group's work items.
  void run(std::span<Work> work, const std::function<void(std::span<Work* const>)>& done);

  const ExecutorCounters& counters() const { return counters_; }

  // The autotuner's choice, agreed by every rank for the cycle (autotune.h).
  void set_fusion_threshold(size_t bytes) { threshold_ = bytes; }
  size_t fusion_threshold() const { return threshold_; }

 private:
  void run_fused_allreduce(std::span<Work* const> group);
  void run_fused_broadcast(std::span<Work* const> group);
  void run_allreduce(Work& w);
  void run_broadcast(Work& w);
  void run_allgather(Work& w);
  void run_reduce_scatter(Work& w);
  void run_alltoall(Work& w);
  // Scratch memory for ranks without a request; `which` picks one of two.
  BufferView scratch(int which, size_t count, DType dtype);
  // The comm op and whether avg must be finished by hand (joined ranks).
  ReduceOp comm_op(const ReadyOp& op, bool& finish_avg) const;
  std::exception_ptr root_missing(const ReadyOp& op) const;

  comm::Communicator& comm_;
  size_t threshold_;
  int rank_;
  int size_;
  FusionBuffer fusion_;
  std::vector<std::byte> scratch_[2];
  std::vector<FusionGroup> groups_;
  std::vector<Work*> members_;
  std::vector<int64_t> counts_;
  ExecutorCounters counters_;
};

}  // namespace cohort::engine
