// `cohortrun --check`: a pre-flight check of the hosts a launch would use.
//
// It runs a mini-launch of the very same job: the same placement (-np, -H,
// --hostfile), store address and port, launch template, payload,
// rank environment (--backend, --network-interface, --env), but with
// cohort-probe (tools/probe) as every slot's program. The probes report into
// the job's store (preflight_protocol.h); cohortrun drives their phases,
// gathers what they found and prints preflight_report.h's judgement: a table
// per host and per pair of hosts, one verdict line, and a fix for each
// problem. This library links no communicator: the probes do the
// communicating.
#pragma once

#include "cohort/launcher/options.h"

namespace cohort::launcher {

// The longest a check waits for its probes before it kills them and judges
// what it has (a hung launch command, a collective that never forms).
inline constexpr double kCheckDeadlineSeconds = 120;

// Runs the check `options` describes (options.check set; the program, if
// any, is not run). Prints the report on stdout. Returns 0 when the launch
// would work, 1 otherwise. Call from the main thread before any other
// thread exists (as run_job).
int run_check(const LaunchOptions& options);

// The probe's path: options.check_probe, else cohort-probe beside
// `self` (this cohortrun), else the build tree's, else "cohort-probe"
// (searched in each host's PATH).
std::string probe_path(const LaunchOptions& options, const std::string& self);

}  // namespace cohort::launcher
