// The remote end of a rank cohortrun starts through the launch template:
// `cohortrun --remote-rank N`, run on the rank's host (see launch_template.h).
//
// It reads the RemotePayload from standard input, then:
//  1. builds the rank's environment: its own environment (what ssh or the
//     wrapper gave it) with the payload's variables on top, and
//     OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = max(1, this
//     host's cores / ranks on this host) unless either sets them;
//  2. changes to the launcher's working directory (a warning when this host
//     has no such directory);
//  3. connects to the job's store (COHORT_STORE_ADDR, COHORT_SECRET of the
//     payload), so an unreachable store is reported here, by address, rather
//     than as a rank timing out later;
//  4. starts the program (found in the rank's PATH) as a child in its own
//     process group, stdin from /dev/null, SIGKILL if this process dies;
//  5. records in the store that rank N started (key started_key(N)), which
//     is what cohortrun's --start-timeout waits for;
//  6. forwards SIGINT, SIGTERM and SIGHUP to the child's group; when its
//     standard input closes (the launcher, or ssh, went away) it sends
//     SIGTERM, then SIGKILL `grace_s` later;
//  7. exits with the child's code, or dies by the child's signal (without a
//     core dump of its own). A rank that failed has its process group killed
//     and the job's leftover shared memory on this host removed.
// Its own messages go to standard error as "cohortrun: rank N on HOST: ...",
// which the launcher forwards with the rank's prefix.
#pragma once

#include <span>
#include <string>

namespace cohort::launcher {

// The flag that selects this mode: `cohortrun --remote-rank N`.
inline constexpr const char* kRemoteRankFlag = "--remote-rank";

// The store key a remote rank sets once its program runs: of `rank`, or in
// an elastic job of a slot's process (incarnation 0 is the rank's key).
std::string started_key(int rank, int incarnation = 0);

// Runs the remote end; `args` are the arguments after argv[0]
// ({"--remote-rank", "N"}). Returns the exit code (or does not return when
// the rank died by a signal).
int run_remote_rank(std::span<const std::string> args);

}  // namespace cohort::launcher
