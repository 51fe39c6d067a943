// The names of event files, as TensorFlow's summary writer makes them:
//   events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2
// (<seconds> since the Unix epoch at creation, <n> a number distinct within
// the process). TensorBoard reads every file of a run directory whose name
// holds "tfevents", in name order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::tfevents {

std::string event_file_name(int64_t seconds, const std::string& host, int64_t pid, int64_t n);

// The paths of the event files directly in `dir` (names holding
// ".tfevents."), sorted by name; empty when `dir` does not exist.
std::vector<std::string> list_event_files(const std::string& dir);

}  // namespace cohort::tfevents
