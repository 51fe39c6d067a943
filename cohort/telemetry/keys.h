// The store keys under which a job's ranks publish their telemetry, in the
// job's root store (not an elastic epoch's namespace: the dashboard and the
// report follow the whole job). Every value is JSON text.
//
//   telemetry/rank/<r>      the latest RankSample of rank r (rank_sample.h),
//                           overwritten a few times a second
//   telemetry/job           the chief's JobRecord at fit() start (job_record.h)
//   telemetry/epochs        how many epoch records there are (decimal)
//   telemetry/epoch/<i>     the chief's EpochRecord i (0-based, in order; an
//                           elastic redo overwrites, never duplicates)
//   telemetry/straggler     rank 0's latest StragglerVerdict (straggler.h)
//   telemetry/events.claimed  event indices handed out to writers (decimal)
//   telemetry/events        how many event records there are (decimal)
//   telemetry/event/<i>     EventRecord i: membership changes, failures
//
// Readers poll: nothing here blocks a rank. A key absent means "not yet"
// (an event below the count whose record is not yet written, when two
// writers raced, is read again at the next poll).
#pragma once

#include <string>

namespace cohort::telemetry::keys {

inline constexpr const char* kPrefix = "telemetry/";
inline std::string rank_sample(int rank) { return "telemetry/rank/" + std::to_string(rank); }
inline constexpr const char* kJob = "telemetry/job";
inline constexpr const char* kEpochCount = "telemetry/epochs";
inline std::string epoch(int64_t index) { return "telemetry/epoch/" + std::to_string(index); }
inline constexpr const char* kStraggler = "telemetry/straggler";
inline constexpr const char* kEventClaims = "telemetry/events.claimed";
inline constexpr const char* kEventCount = "telemetry/events";
inline std::string event(int64_t index) { return "telemetry/event/" + std::to_string(index); }

}  // namespace cohort::telemetry::keys
