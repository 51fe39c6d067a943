// Topology: the machine a simulated job runs on, as cohort-sim reads it from
// a topology file (format in tools/sim/README.md).
//
// Hosts x ranks per host. Three link classes, each an alpha-beta model
// (sending n bytes takes alpha + n / bandwidth):
//   shm      the shm communicator inside one host. Its bandwidth is a bus
//            bandwidth in nccl-tests' sense (cohort-bench's busbw column),
//            its alpha the cost of one synchronised step;
//   intra    point to point between two ranks of one host, for ring
//            algorithms (gloo over TCP loopback; NVLink/PCIe for GPUs);
//   network  one host's NIC, per direction, shared by every flow leaving
//            (or entering) the host; with the CPU a rank spends on each
//            step across it (what competes with compute);
//   ps       the parameter servers' transport between two processes of one
//            host (ZeroMQ over ipc://; across hosts they use `network`).
// Plus per-rank kernel rates (reduction, memcpy), the CPU cores that
// compute competes for, the engine's fixed costs, and stragglers.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cohort/common/json.h"

namespace cohort::sim {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Link {
  double alpha_s = 0;                   // per message (per algorithm step)
  double bytes_per_s = kInfinity;       // per direction
  // The network link only: CPU a rank spends per algorithm step that
  // crosses hosts, and per byte it sends in that step (the kernel's TCP
  // and packet work, the transport's copies). It is the collective's CPU
  // time, which competes with compute for the cores (calibration.h fits
  // it from measured CPU).
  double cpu_step_s = 0;
  double cpu_s_per_byte = 0;
  double time(double bytes) const { return alpha_s + bytes / bytes_per_s; }
};

// The collectives cohort's shm communicator runs with a cost of their own
// (ZeRO's halves are separate code paths, not the allreduce's phases).
enum class Collective { allreduce, reduce_scatter, allgather };
const char* collective_name(Collective c);
Collective parse_collective(const std::string& name);  // ConfigError on others

// The shm link measured at a number of ranks per host, for one collective.
struct ShmLink {
  int ranks = 0;
  Collective collective = Collective::allreduce;
  Link link;
};

struct Straggler {
  int rank = 0;
  double compute_factor = 1;  // its compute takes this many times as long
};

struct Topology {
  int hosts = 1;
  int ranks_per_host = 1;
  Link shm;
  // shm measured at particular numbers of ranks per host, where it does not
  // follow from `shm` (a host whose ranks outnumber its cores: scheduling,
  // not the memory system, sets the pace), for the allreduce or for another
  // collective. Used when ranks_per_host matches.
  std::vector<ShmLink> shm_by_ranks;
  Link intra;
  Link network;
  Link ps;
  double reduce_bytes_per_s = kInfinity;  // reduction kernel, input bytes per second per rank
  double copy_bytes_per_s = kInfinity;    // memcpy per rank (fusion copies, compression casts)

  // The communicators' algorithm switches (their tunables' defaults).
  int64_t shm_slot_bytes = 256 << 10;          // COHORT_SHM_SLOT_BYTES: pipeline chunk of shm
  int64_t shm_small_bytes = 16 << 10;          // COHORT_SHM_SMALL_BYTES: one-step allreduce
  int64_t ring_small_bytes = 1 << 20;          // COHORT_GLOO_BCUBE_BYTES: bcube (log p steps) up to this; 0: never
  int64_t ring_segment_bytes = 1 << 20;        // pipelined ring segment: one alpha per segment and step
  int64_t hierarchical_chunk_bytes = 4 << 20;  // hierarchical pipeline unit
  int64_t hierarchical_small_bytes = 64 << 10; // hierarchical: through local rank 0s up to this

  // CPU. Compute threads beyond the cores run proportionally slower.
  int cores_per_host = 0;     // 0: unlimited (accelerators: compute never contends)
  bool one_machine = false;   // every host is emulated on one machine (scripts/cluster.sh): one set of cores
  // Other programs' runnable threads on those cores (a shared machine's
  // load), each taking a fair share as the job's threads do. The workload's
  // times and the link fits are taken to be measured under the same load.
  double background_threads = 0;

  // The engine's fixed costs on this machine.
  double cycle_overhead_s = 0;  // bookkeeping of one cycle, beyond its collectives
  double wake_s = 0;            // a sleeping engine woken by a submission (doorbell through the store)

  std::vector<Straggler> stragglers;

  int ranks() const { return hosts * ranks_per_host; }
  // The shm link for `ranks` ranks on a host running collective `c`: its own
  // measurement, else the allreduce's at those ranks, else `shm`.
  const Link& shm_for(int ranks, Collective c = Collective::allreduce) const;
  // Ranks whose compute shares one set of cores.
  int ranks_per_machine() const { return one_machine ? ranks() : ranks_per_host; }
};

// Reads a topology document; ConfigError naming the field on bad input.
Topology read_topology(const json::Value& doc);
Topology read_topology_file(const std::string& path);

// The same topology with `hosts` hosts (stragglers beyond it dropped).
Topology with_hosts(Topology t, int hosts);

// The topology as a document read_topology() reads back.
std::string topology_json(const Topology& t);

}  // namespace cohort::sim
