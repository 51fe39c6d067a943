// Catalogue: the machine types a job may run on (format in
// tools/plan/README.md), or one type made of a topology file that
// `cohortrun --check` measured (the simulator's topology format).
#pragma once

#include <string>
#include <vector>

#include "tools/sim/topology.h"

namespace cohort::plan {

struct MachineType {
  std::string name;
  int cores = 1;                     // CPU cores: ranks beyond them are not tried
  int accelerators = 0;              // > 0: one rank per accelerator at most; compute never contends for cores
  double memory_bytes = 0;           // the machine's memory, shared by its ranks (0: not checked)
  double memory_bytes_per_rank = 0;  // one rank's: an accelerator's own memory, a ulimit -v (0: not checked)
  double price_per_hour = 0;         // USD per machine and hour, billed per second
  int available = 1;                 // machines of this type that can be had
  // Compute speed of one rank relative to the profiled machine's, or its
  // FLOP/s (with the profile's flop_per_example); 1 when neither is given.
  double compute_speedup = 1;
  double flop_per_s = 0;
  // Links, kernel rates and engine costs of one machine; hosts and
  // ranks_per_host are the plan's. network bandwidth and latency from the
  // type's own fields.
  sim::Topology topology;
  std::vector<int> ranks_per_machine;  // the counts to try, ascending
};

struct Catalogue {
  std::string path;
  std::vector<MachineType> types;
};

// ConfigError (one line: the file, the field, what was expected) on bad input.
Catalogue read_catalogue_file(const std::string& path);
Catalogue read_catalogue(const json::Value& doc, const std::string& path);

// One machine type from a measured topology (`cohortrun --check`): its
// hosts are the machines available, ranks per machine up to its cores (or
// its ranks per host); price and memory from the flags (0: free, not
// checked).
Catalogue catalogue_from_topology_file(const std::string& path, double price_per_hour, double memory_bytes,
                                       double memory_bytes_per_rank = 0);

}  // namespace cohort::plan
