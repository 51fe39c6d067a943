// The backstop for shared memory a crashed job leaves behind.
#pragma once

#include <string>
#include <vector>

namespace cohort::launcher {

// Removes every entry of `directory` whose name starts with
// "cohort-<job_id>-" (the names the shm communicator gives its segments, and
// an elastic job's commit parts; a directory with its contents) and
// returns the names removed. A missing directory removes nothing. `job_id`
// must satisfy job_id_problem() (no '-'), so no other job's names match.
std::vector<std::string> remove_job_segments(const std::string& job_id,
                                             const std::string& directory = "/dev/shm");

}  // namespace cohort::launcher
