#include "cohort/common/check.h"

#include "cohort/common/logging.h"

namespace cohort::detail {

std::string Message::what() const {
  std::string text = text_.str();
  if (text.empty()) {
    // Nothing but the check to go by.
    if (*condition_ == '\0') return kind_;
    text = std::string("check failed: ") + condition_;
    if (!values_.empty()) text += " (" + values_ + ")";
    return text;
  }
  if (!values_.empty()) text += std::string(" (") + condition_ + ": " + values_ + ")";
  return text;
}

std::string Message::where() const {
  std::string_view base = file_;
  if (const size_t slash = base.rfind('/'); slash != std::string_view::npos) base.remove_prefix(slash + 1);
  std::string where = std::string(base) + ":" + std::to_string(line_);
  if (*condition_ != '\0') {
    where += std::string(": check failed: ") + condition_;
    if (!values_.empty()) where += " (" + values_ + ")";
  }
  return where;
}

void log_raise(const Message& m) {
  // would_log, not COHORT_LOG's threshold(): this runs while an error is
  // raised, possibly the one about a malformed COHORT_LOG_LEVEL.
  if (!logging::would_log(logging::Level::debug)) return;
  COHORT_LOG(debug) << "raising " << m.kind() << " at " << m.where() << ": " << m.what();
}

}  // namespace cohort::detail
