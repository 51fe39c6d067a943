// simulate(): a discrete-event simulation of data-parallel training steps as
// cohort runs them, on a Topology, for a Workload, under a Strategy.
//
// What is modelled, step by step:
//   - compute: the workload's gradients become ready as backward proceeds;
//     every rank computes the same (data parallelism), a straggler slows
//     every rank's step to its pace (collectives wait for it), and so does
//     the slowest rank of each step where the workload has its measured
//     step periods (jitter.h: the median of the largest of R draws);
//   - CPU sharing (when the topology has cores_per_host): the ranks'
//     compute threads and the engine threads' CPU-bound collective work
//     share the machine's cores fairly (processor sharing), so compute and
//     communication slow each other down where they overlap;
//   - the engine (cohort/engine): one thread per rank running cycles back to
//     back; a cycle collects what was submitted before it began, agrees on
//     it (an allgather of the cycle records, or Horovod's gather+broadcast
//     tree), plus an allgatherv of names the first time an op is seen (or
//     always, beyond the response cache's capacity), then runs the ready ops
//     in cache-slot order, fused by cohort's own plan_fusion() up to the
//     fusion threshold (copies in and out of the fusion buffer), ordered
//     (DDP) ops four per cycle at most and never fused; an idle engine keeps
//     cycling for the linger time and then sleeps until a submission wakes
//     it (wake_s); idle cycles that take no time (free links, no
//     cycle_overhead_s, no cycle time) wait for the next submission or the
//     linger's end instead of repeating at one instant; with a cycle time,
//     a cycle starts no sooner than that after the previous one began;
//   - strategies: Horovod-style named per-tensor allreduces, or DDP buckets
//     (cohort's assign_buckets rule: first bucket capped at
//     first_bucket_bytes, then bucket_bytes, a tensor that fills a bucket
//     alone gets its own; submitted in index order); compression to 2-byte
//     floats (half the bytes, plus the casts);
//   - ZeRO (data_parallel/zero_optimizer.h), ordered ops on the engine:
//     stages 1 and 2 reduce-scatter flat buckets (ZeroOptimizer's packing
//     rule) as backward fills them, update 1/p of the model, and allgather
//     the buckets, first layers first, each waited for by the next forward
//     just before the first layer that needs it; stage 3 gathers each unit
//     (workload tensors' `unit`s, joined in forward order into units of
//     unit_bytes as the zero strategy joins a Sequential's layers) before
//     its forward, prefetching the
//     next, and again when backward reaches it (started as the unit after
//     it is done: exposed), the last unit kept from forward to backward,
//     and reduce-scatters each unit's gradient when it is ready. Where the
//     forward pass's layers fall is the workload's forward_s, cut in
//     proportion to the parameters' bytes;
//   - parameter servers (cohort/parameter_server, synchronous): the last
//     ps_servers ranks serve; a worker pushes every gradient after
//     backward, the servers sum their part (and update it, with their own
//     optimizer), the workers pull the sums or the model and (with the
//     program's optimizer) update, one after the other (cohort's
//     ShardedTraining does not overlap them);
//   - collectives: collectives.h, per algorithm.
// Not modelled: pipeline and tensor parallelism, asynchronous or stale
// parameter servers and sparse tables, the servers' CPU use on a shared
// machine, network contention between jobs, jitter in a pipeline or
// tensor-parallel mesh (predict_mesh) and jitter that moves the ranks
// together (a shared load: it waits less than independent jitter does).
//
// Deterministic: the same inputs give the same outputs, bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/sim/collectives.h"
#include "tools/sim/topology.h"
#include "tools/sim/workload.h"

namespace cohort::sim {

enum class Mode { horovod, ddp, zero, parameter_server };
enum class Negotiation { cohort, tree };

struct Strategy {
  Mode mode = Mode::horovod;
  std::string backend = "auto";                // collectives.h's resolve_algorithm
  int64_t fusion_threshold_bytes = 256 << 10;  // COHORT_FUSION_THRESHOLD; 0: no fusion
  double cycle_time_s = 0;                     // COHORT_CYCLE_TIME_US; 0: back to back
  double linger_s = 1e-3;                      // COHORT_CYCLE_LINGER_US
  int64_t cache_capacity = 1024;               // COHORT_CACHE_CAPACITY
  int64_t first_bucket_bytes = 1 << 20;        // DDP
  int64_t bucket_bytes = 25 << 20;             // DDP; ZeRO stages 1-2 (ZeroOptions::bucket_bytes)
  int zero_stage = 1;                          // Mode::zero: 1, 2 or 3
  int64_t unit_bytes = 1 << 20;                // zero stage 3: layers joined into units of this much (unit_mb)
  int ps_servers = 1;                          // Mode::parameter_server: the last ranks that serve
  bool ps_servers_update = false;              // the servers' optimizer; else they sum and workers update
  bool compress_fp16 = false;                  // gradients travel as 2-byte floats
  Negotiation negotiation = Negotiation::cohort;
};

struct SimOptions {
  int steps = 6;   // simulated steps
  int warmup = 1;  // first steps left out of the averages (names negotiated, cold cache)
};

struct Prediction {
  int hosts = 0;
  int ranks = 0;
  std::string algorithm;
  double step_s = 0;         // mean steady-state step time
  double compute_s = 0;      // the same step on these ranks if communication were free
  double single_rank_s = 0;  // the step on one rank alone (the efficiency's reference)
  double exposed_s = 0;      // step_s - compute_s: communication not hidden behind compute
  double efficiency = 0;     // single_rank_s / step_s (per-rank throughput vs one rank)
  double comm_s = 0;         // engine time per step in collectives (busy, not idle cycles)
  double nic_utilisation = 0;  // per direction: NIC busy time / step time
  double shm_utilisation = 0;  // shm bus time / step time
  double cycles = 0;           // engine cycles per step (idle ones included)
  double collectives = 0;      // collectives per step (fusion groups)
  std::vector<double> step_times;  // every simulated step, warm-up included
};

// "horovod", "ddp", "zero", "parameter_server"; ConfigError otherwise.
Mode mode_from_name(const std::string& name);
const char* mode_name(Mode mode);

Prediction simulate(const Topology& topology, const Workload& workload, const Strategy& strategy,
                    const SimOptions& options = {});

// One runnable thread's share of a core among `runnable` of the job's
// threads and the machine's background threads (processor sharing; 1
// without a core limit). The rule compute and the engine's CPU work share a
// host's cores by, here and in predict_mesh().
double core_share(const Topology& t, double runnable);

// Bucket membership by cohort's DDP rule (cohort/torch/reducer.cc's
// assign_buckets for one dtype): sizes in arrival order -> index lists.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<double>& bytes, double first_cap, double cap);

}  // namespace cohort::sim
