// Host discovery for elastic jobs (cohortrun --host-discovery-script S): the
// hosts a job may run on now, as a program prints them, polled while the job
// runs (Horovod's --host-discovery-script).
//
// The script runs under /bin/sh -c with the launcher's environment and
// prints one "host" or "host:slots" per line (blank lines ignored); an empty
// output means no host is available now. A run that exits non-zero, takes
// longer than `timeout`, or prints a malformed line is a failed discovery,
// reported with the reason (the script's process group is killed on a
// timeout); the caller keeps the hosts it knew. The launcher runs it on its
// supervising thread: a slow script delays the launcher's other work by up
// to the timeout.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cohort/launcher/host_list.h"

namespace cohort::launcher {

struct Discovery {
  bool ok = false;
  std::vector<HostSlots> hosts;  // when ok
  std::string error;             // when not: what went wrong, naming the script
};

// How long one run of the script may take.
inline constexpr std::chrono::milliseconds kDiscoveryTimeout{5000};
// How often the launcher runs it while the job runs.
inline constexpr std::chrono::milliseconds kDiscoveryPeriod{1000};

// Runs `script` once and parses what it printed.
Discovery discover_hosts(const std::string& script, std::chrono::milliseconds timeout);

// Parses discovery output; `source` names the script in messages. Throws
// UsageError for a malformed line.
std::vector<HostSlots> parse_discovered_hosts(const std::string& text, const std::string& source);

}  // namespace cohort::launcher
