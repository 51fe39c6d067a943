// cohortrun's job: start the store and the ranks, supervise them, report,
// clean up.
#pragma once

#include "cohort/launcher/options.h"

namespace cohort::launcher {

// Runs the job `options` describes (options.help is not looked at) and
// returns cohortrun's exit code (see usage_text()). Writes ranks' prefixed
// output to stdout and stderr and its own messages to stderr. Must be called
// from the main thread before the process starts any other thread: it
// blocks the signals it handles before the store server's thread exists.
int run_job(const LaunchOptions& options);

}  // namespace cohort::launcher
