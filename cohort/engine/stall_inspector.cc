#include "cohort/engine/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cohort/common/seconds.h"

namespace cohort::engine {
namespace {

std::string ranks_where(const std::vector<bool>& present, bool value) {
  std::ostringstream os;
  int n = 0;
  for (size_t r = 0; r < present.size(); ++r)
    if (present[r] == value) os << (n++ ? ", " : "") << r;
  return (n == 1 ? "rank " : "ranks ") + os.str();
}

constexpr size_t kMaxListed = 20;

}  // namespace

StallInspector::StallInspector(double warning_s, double shutdown_s)
    : warning_(steady_seconds(warning_s)), shutdown_(steady_seconds(shutdown_s)) {}

StallInspector::Clock::duration StallInspector::pass_interval() const {
  auto base = warning_ > Clock::duration::zero() ? warning_ : shutdown_;
  if (shutdown_ > Clock::duration::zero()) base = std::min(base, shutdown_);
  return std::clamp<Clock::duration>(base / 20, std::chrono::milliseconds(1), std::chrono::seconds(1));
}

void StallInspector::begin(Clock::time_point now) {
  now_ = now;
  for (auto& [_, op] : ops_) op.seen = false;
}

void StallInspector::observe(const std::string& what, const std::vector<bool>& present) {
  auto [it, inserted] = ops_.try_emplace(what);
  Op& op = it->second;
  if (inserted) {
    op.since = now_;
    op.next_warning = now_ + warning_;
  }
  op.present = present;
  op.seen = true;
}

void StallInspector::end() {
  std::erase_if(ops_, [](const auto& kv) { return !kv.second.seen; });
}

std::string StallInspector::describe(const std::string& what, const Op& op, Clock::time_point now) {
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f", std::chrono::duration<double>(now - op.since).count());
  return what + ": missing " + ranks_where(op.present, false) + " (submitted by " +
         ranks_where(op.present, true) + ", waiting " + waited + " s)";
}

StallInspector::Findings StallInspector::check(Clock::time_point now) {
  Findings f;
  std::vector<const std::pair<const std::string, Op>*> due, fatal;
  for (auto& kv : ops_) {
    Op& op = kv.second;
    if (shutdown_ > Clock::duration::zero() && now - op.since >= shutdown_) fatal.push_back(&kv);
    if (warning_ > Clock::duration::zero() && now >= op.next_warning) {
      due.push_back(&kv);
      op.next_warning = now + warning_;
    }
  }
  auto list = [&](const auto& items) {
    std::string s;
    for (size_t i = 0; i < items.size() && i < kMaxListed; ++i)
      s += "\n  " + describe(items[i]->first, items[i]->second, now);
    if (items.size() > kMaxListed) s += "\n  ... and " + std::to_string(items.size() - kMaxListed) + " more";
    return s;
  };
  if (!due.empty())
    f.warning = "stall: some ranks have waited more than " +
                seconds_text(std::chrono::duration<double>(warning_).count()) +
                " s for ops that other ranks have not submitted (every rank must submit the same names; "
                "a rank that ran out of data should call join()):" +
                list(due);
  if (!fatal.empty())
    f.shutdown = "stall shutdown after " + seconds_text(std::chrono::duration<double>(shutdown_).count()) +
                 " s (COHORT_STALL_SHUTDOWN_S): ops that some ranks never submitted:" + list(fatal);
  return f;
}

std::optional<StallInspector::Clock::time_point> StallInspector::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [_, op] : ops_) {
    if (warning_ > Clock::duration::zero()) next = std::min(next.value_or(op.next_warning), op.next_warning);
    if (shutdown_ > Clock::duration::zero()) {
      const auto t = op.since + shutdown_;
      next = std::min(next.value_or(t), t);
    }
  }
  return next;
}

}  // namespace cohort::engine
