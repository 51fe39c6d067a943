// The post-run report (cohortrun --report FILE.html): the dashboard's page
// with the job's final Status and Chart.js inline, one self-contained HTML
// file (no request to any server or network when opened) that a user can
// attach to a bug report: the job's state and failure, per-rank table, step
// times, where the time went, metrics per epoch, events.
#pragma once

#include <string>
#include <string_view>

namespace cohort::dashboard {

// The report's HTML for `status_json` (an /api/status document).
std::string render_report(std::string_view status_json);

// Writes render_report() to `path` atomically (a reader never sees half a
// file); Error naming the path when it cannot be written.
void write_report(const std::string& path, std::string_view status_json);

}  // namespace cohort::dashboard
