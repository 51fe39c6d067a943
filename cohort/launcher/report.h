// The messages cohortrun prints about how a job ended.
#pragma once

#include <string>

#include "cohort/launcher/supervisor.h"

namespace cohort::launcher {

// For StopReason::rank_failed: names the first failing rank and how it ended
// ("rank 2 was killed by signal 9 (SIGKILL)", "rank 1 exited with code 3";
// a rank on another host is "rank 1 on node2"),
// its last lines of output, then every other rank that failed on its own
// (with its last lines) and how the remaining ranks ended. Lines start with
// "cohortrun: "; the text ends with a newline.
std::string failure_report(const SupervisionResult& result);

// For the other reasons: for StopReason::signal one line ("cohortrun: stopped
// by SIGINT; ...") and another naming the ranks killed because they were
// still running when the grace period ended; empty for none, launch_failed
// and start_timeout (whose message the launcher prints itself).
std::string stop_summary(const SupervisionResult& result);

// cohortrun's exit code for `result` (see usage_text()).
int exit_code(const SupervisionResult& result);

}  // namespace cohort::launcher
