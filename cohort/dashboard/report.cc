#include "cohort/dashboard/report.h"

#include "cohort/common/atomic_file.h"
#include "cohort/dashboard/assets.h"

namespace cohort::dashboard {

std::string render_report(std::string_view status_json) { return inlined_page(status_json); }

void write_report(const std::string& path, std::string_view status_json) {
  // A report is written once at the job's end; if the machine dies just
  // after, the job's own output says more than the report would.
  write_file_atomically(path, render_report(status_json), {.durability = Durability::none});
}

}  // namespace cohort::dashboard
