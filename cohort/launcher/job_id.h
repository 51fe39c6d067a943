// Job ids: the name that ties a run's ranks, store keys and shared-memory
// segments (/dev/shm/cohort-<job_id>-*) together.
#pragma once

#include <string>
#include <string_view>

namespace cohort::launcher {

// A fresh id, unique per run on this machine and safe in file names: 22
// lowercase hex digits from the time, the launcher's pid and 32 random bits.
std::string generate_job_id();

// Empty when `id` is acceptable, else why not. Accepted: 1 to 64 letters,
// digits, '_' and '.'. No '-', because '-' ends the job id in shared-memory
// names: with job ids "a" and "a-b" on one machine, cleaning up
// "cohort-a-*" would remove the other job's segments.
std::string job_id_problem(std::string_view id);

}  // namespace cohort::launcher
