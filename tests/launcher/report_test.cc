#include "cohort/launcher/report.h"

#include <signal.h>

#include <gtest/gtest.h>

#include "cohort/launcher/exit_status.h"
#include "cohort/launcher/signals.h"

namespace cohort::launcher::report_test {
namespace {

// Wait statuses as the kernel encodes them.
ExitStatus exited(int code) { return ExitStatus{code << 8}; }
ExitStatus killed(int signo, bool core = false) { return ExitStatus{signo | (core ? 0x80 : 0)}; }

RankRecord record(int rank, ExitStatus status, int signal_sent = 0, std::vector<std::string> lines = {}) {
  RankRecord r;
  r.rank = rank;
  r.pid = 1000 + rank;
  r.ended = true;
  r.status = status;
  r.signal_sent = signal_sent;
  for (const auto& l : lines) r.tail.add(l);
  return r;
}

TEST(SignalName, NamesSignals) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(signal_name(SIGRTMIN + 2), "SIGRTMIN+2");
  EXPECT_EQ(signal_name(200), "signal 200");
}

TEST(ExitStatus, DescribesHowAProcessEnded) {
  EXPECT_EQ(describe(exited(0)), "exited with code 0");
  EXPECT_EQ(describe(exited(3)), "exited with code 3");
  EXPECT_EQ(describe(killed(SIGKILL)), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(describe(killed(SIGSEGV, true)), "was killed by signal 11 (SIGSEGV, core dumped)");
  EXPECT_TRUE(exited(0).success());
  EXPECT_FALSE(exited(1).success());
  EXPECT_FALSE(killed(SIGTERM).success());
  EXPECT_EQ(killed(SIGTERM).signal(), SIGTERM);
  EXPECT_EQ(killed(SIGTERM).code(), -1);
}

TEST(ExitStatus, LauncherExitCodes) {
  EXPECT_EQ(launcher_exit_code(exited(0)), 0);
  EXPECT_EQ(launcher_exit_code(exited(3)), 1);
  EXPECT_EQ(launcher_exit_code(exited(255)), 1);
  EXPECT_EQ(launcher_exit_code(killed(SIGKILL)), 137);
  EXPECT_EQ(launcher_exit_code(killed(SIGSEGV)), 139);
}

TEST(Report, NamesTheFailedRankItsEndAndItsLastLines) {
  SupervisionResult result;
  result.reason = StopReason::rank_failed;
  result.failed_rank = 2;
  result.ranks = {record(0, killed(SIGTERM), SIGTERM), record(1, exited(0)),
                  record(2, killed(SIGKILL), 0, {"loading", "step 7"}), record(3, exited(1), SIGTERM)};
  const std::string text = failure_report(result);
  EXPECT_NE(text.find("cohortrun: error: rank 2 was killed by signal 9 (SIGKILL); stopped the other 3 rank(s)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("last 2 line(s) of rank 2 (pid 1002):\n    [2] loading\n    [2] step 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("other ranks: rank 0 was stopped by cohortrun (SIGTERM); rank 1 exited with code 0; "
                      "rank 3 exited with code 1 after cohortrun sent SIGTERM\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(exit_code(result), 128 + SIGKILL);
}

TEST(Report, ListsOtherRanksThatFailedOnTheirOwn) {
  SupervisionResult result;
  result.reason = StopReason::rank_failed;
  result.failed_rank = 1;
  result.ranks = {record(0, exited(7), 0, {"PeerLostError: rank 1"}), record(1, exited(3), 0, {"boom"})};
  const std::string text = failure_report(result);
  EXPECT_NE(text.find("rank 1 exited with code 3"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 also exited with code 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[0] PeerLostError: rank 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("other ranks"), std::string::npos) << text;
  EXPECT_LT(text.find("[1] boom"), text.find("[0] PeerLostError")) << "the first failure comes first";
  EXPECT_EQ(exit_code(result), 1);
}

TEST(Report, SaysWhenTheRankPrintedNothing) {
  SupervisionResult result;
  result.reason = StopReason::rank_failed;
  result.failed_rank = 0;
  result.ranks = {record(0, exited(2))};
  const std::string text = failure_report(result);
  EXPECT_NE(text.find("rank 0 (pid 1000) printed nothing"), std::string::npos) << text;
  EXPECT_EQ(text.find("stopped the other"), std::string::npos) << text;
}

TEST(Report, SignalStopAndSuccess) {
  SupervisionResult result;
  result.reason = StopReason::signal;
  result.signal = SIGINT;
  result.ranks = {record(0, killed(SIGINT), SIGINT), record(1, exited(0), SIGINT)};
  EXPECT_EQ(stop_summary(result), "cohortrun: stopped by SIGINT; 1 of 2 rank(s) exited with code 0\n");
  EXPECT_EQ(exit_code(result), 130);
  EXPECT_EQ(failure_report(result), "");

  // Ranks that handled the signal and exited with one code of their own
  // (a preempted fit(): 75) give that code; mixed endings give 128 + S.
  result.signal = SIGTERM;
  result.ranks = {record(0, exited(75), SIGTERM), record(1, exited(75), SIGTERM)};
  EXPECT_EQ(exit_code(result), 75);
  result.ranks = {record(0, exited(75), SIGTERM), record(1, exited(0), SIGTERM)};
  EXPECT_EQ(exit_code(result), 128 + SIGTERM);
  result.ranks = {record(0, exited(0), SIGTERM), record(1, exited(0), SIGTERM)};
  EXPECT_EQ(exit_code(result), 128 + SIGTERM);
  // Ranks still running when the grace period ended are named.
  result.signal = SIGTERM;
  result.grace_s = 2;
  result.ranks = {record(0, killed(SIGKILL), SIGKILL), record(1, exited(0), SIGTERM), record(2, killed(SIGKILL), SIGKILL)};
  result.ranks[0].killed_after_grace = result.ranks[2].killed_after_grace = true;
  result.ranks[2].host = "node2";
  EXPECT_EQ(stop_summary(result),
            "cohortrun: stopped by SIGTERM; 1 of 3 rank(s) exited with code 0\n"
            "cohortrun: rank 0 (pid 1000), rank 2 on node2 (pid 1002) were still running 2 s after SIGTERM "
            "(--signal-grace-s) and killed with SIGKILL\n");

  SupervisionResult ok;
  ok.ranks = {record(0, exited(0))};
  EXPECT_EQ(exit_code(ok), 0);
  EXPECT_EQ(stop_summary(ok), "");
  ok.reason = StopReason::launch_failed;
  EXPECT_EQ(exit_code(ok), 1);
}

}  // namespace
}  // namespace cohort::launcher::report_test
