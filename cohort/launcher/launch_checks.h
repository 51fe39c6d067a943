// What cohortrun can tell is wrong with a command line before it starts
// anything: mistakes that would otherwise surface as a rank's error a minute
// later, or as another error that hides the real one.
#pragma once

#include <string>

#include "cohort/launcher/options.h"

namespace cohort::launcher {

// Throws UsageError, naming the flag, for a multi-host launch that cannot
// work:
//  - --backend shm (or --env COHORT_BACKEND=shm) with ranks on more than one
//    of the hosts: shared memory reaches the ranks of one host only;
//  - a loopback --store-addr (127.0.0.0/8, ::1, or a name that resolves to
//    loopback only) while a rank runs on a host that is not itself a
//    loopback address: no other host can reach it;
//  - --network-interface (or --env COHORT_IFACE) naming a loopback interface
//    ("lo", or one this machine flags as loopback) in that case.
// Nothing to check without hosts (every rank on this machine).
void check_multi_host_launch(const LaunchOptions& options);

// Throws UsageError when hosts were given and the program's first words look
// like more of them (`-H a:2 b:2 prog`: a space where the comma belongs made
// `b:2` the program and every later flag, --dry-run included, its
// arguments), unless such a program exists. `hosts_text` is the -H value,
// empty for a hostfile.
void check_program_is_not_a_host(const LaunchOptions& options, const std::string& hosts_text);

}  // namespace cohort::launcher
