#include "cohort/launcher/report.h"

#include <sstream>

#include "cohort/launcher/signals.h"

namespace cohort::launcher {
namespace {

// A rank failed "on its own" unless it ended after the launcher signalled it.
bool failed_on_its_own(const RankRecord& r) { return r.ended && !r.status.success() && r.signal_sent == 0; }

// "rank 3", or "rank 3 on node2" for a rank on another host.
std::string rank_name(const RankRecord& r) {
  std::string text = "rank " + std::to_string(r.rank);
  if (!r.host.empty()) text += " on " + r.host;
  return text;
}

std::string how_it_ended(const RankRecord& r) {
  if (!r.ended) return "was still running";
  if (r.signal_sent != 0 && r.status.signaled() && r.status.signal() == r.signal_sent)
    return "was stopped by cohortrun (" + signal_name(r.signal_sent) + ")";
  std::string text = describe(r.status);
  if (r.signal_sent != 0) text += " after cohortrun sent " + signal_name(r.signal_sent);
  return text;
}

void append_tail(std::ostringstream& os, const RankRecord& r) {
  if (r.tail.lines().empty()) {
    os << "cohortrun: " << rank_name(r) << " (pid " << r.pid << ") printed nothing\n";
    return;
  }
  os << "cohortrun: last " << r.tail.lines().size() << " line(s) of " << rank_name(r) << " (pid " << r.pid
     << "):\n";
  for (const std::string& line : r.tail.lines()) os << "    [" << r.rank << "] " << line << '\n';
}

}  // namespace

std::string failure_report(const SupervisionResult& result) {
  const RankRecord* failed = nullptr;
  for (const RankRecord& r : result.ranks)
    if (r.rank == result.failed_rank) failed = &r;
  if (!failed) return {};

  std::ostringstream os;
  const int others = static_cast<int>(result.ranks.size()) - 1;
  os << "cohortrun: error: " << rank_name(*failed) << " " << describe(failed->status);
  if (!failed->host.empty() && failed->status.exited() && failed->status.code() == 255)
    os << " (through ssh, 255 also means that the host could not be reached or the rank was killed by a signal)";
  if (others > 0) os << "; stopped the other " << others << " rank(s)";
  os << '\n';
  append_tail(os, *failed);
  for (const RankRecord& r : result.ranks)
    if (&r != failed && failed_on_its_own(r)) {
      os << "cohortrun: " << rank_name(r) << " also " << describe(r.status) << '\n';
      append_tail(os, r);
    }
  std::ostringstream rest;
  bool any = false;
  for (const RankRecord& r : result.ranks) {
    if (&r == failed || failed_on_its_own(r)) continue;
    rest << (any ? "; " : "") << rank_name(r) << " " << how_it_ended(r);
    any = true;
  }
  if (any) os << "cohortrun: other ranks: " << rest.str() << '\n';
  return os.str();
}

std::string stop_summary(const SupervisionResult& result) {
  if (result.reason != StopReason::signal) return {};
  int clean = 0;
  std::string killed;
  int killed_count = 0;
  for (const RankRecord& r : result.ranks) {
    clean += r.status.success() ? 1 : 0;
    if (r.killed_after_grace) {
      killed += (killed.empty() ? "" : ", ") + rank_name(r) + " (pid " + std::to_string(r.pid) + ")";
      ++killed_count;
    }
  }
  std::ostringstream os;
  os << "cohortrun: stopped by " << signal_name(result.signal) << "; " << clean << " of " << result.ranks.size()
     << " rank(s) exited with code 0\n";
  if (killed_count > 0)
    os << "cohortrun: " << killed << (killed_count == 1 ? " was" : " were") << " still running " << result.grace_s
       << " s after " << signal_name(result.signal) << " (--signal-grace-s) and killed with SIGKILL\n";
  return os.str();
}

int exit_code(const SupervisionResult& result) {
  switch (result.reason) {
    case StopReason::none:
      return 0;
    case StopReason::signal: {
      // Ranks that handled the forwarded signal and all exited with one
      // code of their own give that code (fit()'s preemption exits with 75:
      // backed up, launch again to resume); otherwise 128 + the signal.
      int common = -1;
      for (const RankRecord& r : result.ranks) {
        if (r.absorbed) continue;  // an elastic job went on without it
        if (!r.status.exited() || (common >= 0 && r.status.code() != common)) return 128 + result.signal;
        common = r.status.code();
      }
      return common > 0 ? common : 128 + result.signal;
    }
    case StopReason::launch_failed:
    case StopReason::start_timeout:
    case StopReason::elastic_ended:
    case StopReason::host_lost: return 1;
    case StopReason::rank_failed:
      for (const RankRecord& r : result.ranks)
        if (r.rank == result.failed_rank && !r.absorbed) return launcher_exit_code(r.status);
      return 1;
  }
  return 1;
}

}  // namespace cohort::launcher
