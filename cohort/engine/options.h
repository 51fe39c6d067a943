// Options of an Engine and of each op it runs.
//
// EngineOptions fields left at their "unset" value take the COHORT_* tunable
// (see cohort/common/tunables.def); resolve() fills them in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/common/buffer_view.h"
#include "cohort/common/reduce_op.h"

namespace cohort::engine {

struct EngineOptions {
  int64_t fusion_threshold_bytes = -1;  // < 0: COHORT_FUSION_THRESHOLD; 0: no fusion
  std::chrono::microseconds linger{-1}; // < 0: COHORT_CYCLE_LINGER_US
  std::chrono::microseconds cycle_time{-1};  // < 0: COHORT_CYCLE_TIME_US; 0: back to back
  int autotune = -1;                    // < 0: COHORT_AUTOTUNE; 0 off, 1 on (autotune.h)
  std::optional<std::string> autotune_log;  // unset: COHORT_AUTOTUNE_LOG; "": none
  double stall_warning_s = -1;          // < 0: COHORT_STALL_WARNING_S; 0: off
  double stall_shutdown_s = -1;         // < 0: COHORT_STALL_SHUTDOWN_S (< 0: COHORT_TIMEOUT_S); 0: off
  std::optional<std::string> timeline_path;  // unset: COHORT_TIMELINE; "": none
  int64_t cache_capacity = -1;          // < 0: COHORT_CACHE_CAPACITY
  // Names this engine in logs and in the timeline ("world", "dp", "tp/3"...).
  std::string label = "engine";
  // Longest a sleeping engine thread waits on the doorbell before it looks
  // again (it is woken by work long before; this bounds a lost store).
  std::chrono::milliseconds doorbell_slice{std::chrono::minutes(10)};
  // While this rank has ops waiting and the group sleeps, it wakes the group
  // this often for one cycle, so that the communicator's liveness checks
  // notice a peer that died in the meantime (no cost while idle).
  std::chrono::milliseconds liveness_probe{std::chrono::seconds(5)};
  // Elastic worlds (comm/create.h's CommunicatorOptions::abandoned): asked
  // at each liveness probe while this rank has ops waiting. A reason means
  // the launcher abandoned the world (a member lost, maybe one outside this
  // engine's group): members may have left for the next world and will
  // never submit their part, so the engine fails every rank's ops with
  // PeerLostError naming it, as an abort does, instead of waiting on them.
  // Called on the engine's thread: it must not wait for the caller's locks.
  std::function<std::optional<std::string>()> abandoned;

  // Every unset field from the environment; throws ConfigError on bad values.
  EngineOptions resolve() const;
};

// Elements to hold an allgather's result: called on the engine thread with
// the total element count and each rank's count; returns where to write
// (count == total, dtype == the input's).
using AllgatherAllocator = std::function<BufferView(size_t total, std::span<const size_t> counts)>;

struct AllreduceOptions {
  ReduceOp op = ReduceOp::sum;
  double prescale = 1.0;   // multiplies the input before the reduction (floating dtypes)
  double postscale = 1.0;  // multiplies the result
  std::vector<int64_t> shape;  // optional; ranks must agree on it
};

struct AllgatherOptions {
  size_t row_elements = 1;  // elements per dim-0 row: counts must be multiples of it
  std::vector<int64_t> shape;  // optional; ranks must agree on all but dim 0
  AllgatherAllocator allocate;  // unset: the handle owns the result
};

struct BroadcastOptions {
  std::vector<int64_t> shape;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;  // of the input
};

struct AlltoallOptions {
  std::vector<int64_t> shape;
};

}  // namespace cohort::engine
