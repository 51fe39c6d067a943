// What `cohortrun --check` (preflight.h) and its probe (tools/probe) say to
// each other through the job's store: the keys, and the fixed values. Both
// sides include this header; the values are JSON documents whose fields are
// listed in tools/probe/README.md.
//
// The sequence:
//   1. every probe rank sets facts_key(rank) (its host's facts); the leader
//      of each host (local rank 0) first opens its link listener;
//   2. cohortrun sets kRosterKey once every rank either set its facts or
//      ended: the ranks present, comma-separated;
//   3. each host's leader probes every other present host's listener on each
//      address, measures the link it would use, and sets links_key(rank);
//   4. cohortrun sets kGoKey: "1" when the collectives can run (every rank
//      present, every pair reachable, /dev/shm large enough), else the reason;
//   5. with "1", every rank runs the collectives and sets collectives_key(rank);
//      rank 0 also sets kTopologyKey (the simulator's topology file) and
//      kFitKey (how well it fits);
//   6. every rank sets done_key(rank) and exits 0.
#pragma once

#include <string>

namespace cohort::launcher::preflight {

inline std::string facts_key(int rank) { return "check/facts/" + std::to_string(rank); }
inline std::string links_key(int rank) { return "check/links/" + std::to_string(rank); }
inline std::string collectives_key(int rank) { return "check/collectives/" + std::to_string(rank); }
inline std::string done_key(int rank) { return "check/done/" + std::to_string(rank); }
inline constexpr const char* kRosterKey = "check/roster";
inline constexpr const char* kGoKey = "check/go";
inline constexpr const char* kTopologyKey = "check/topology";
// How well the topology's links fit the timed allreduces: {"shm": {...},
// "network": {...}}, each {"collective", "points", "rms", "max"} (relative errors),
// or {"error"} where the samples allowed no fit.
inline constexpr const char* kFitKey = "check/fit";
// The collectives' store namespace (every backend's rendezvous under it).
inline constexpr const char* kCollectivesPrefix = "check/comm/";

// The probe's program name, found beside cohortrun (or --check-probe).
inline constexpr const char* kProbeProgram = "cohort-probe";
// Its first argument, so that it refuses to run outside a check.
inline constexpr const char* kProbeFlag = "--cohortrun-check";

}  // namespace cohort::launcher::preflight
