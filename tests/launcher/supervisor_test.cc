#include "cohort/launcher/supervisor.h"

#include "cohort/launcher/report.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::supervisor_test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kBoundSeconds = 15;  // generous; the fast paths take well under a second

// A pipe standing in for cohortrun's stdout or stderr.
class Sink {
 public:
  Sink() {
    EXPECT_EQ(::pipe2(fds_, O_NONBLOCK), 0);
    ::fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20);
  }
  ~Sink() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  int fd() const { return fds_[1]; }
  std::string take() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fds_[2];
};

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorOptions options(double signal_grace_s = 30) {
    return {.grace_s = 0.5, .signal_grace_s = signal_grace_s, .drain_s = 0.2, .stdout_fd = out_.fd(), .stderr_fd = err_.fd()};
  }

  static SpawnedProcess sh(const std::string& script) {
    return spawn_process({.path = "/bin/sh", .argv = {"sh", "-c", script}, .envp = {"PATH=/bin:/usr/bin"}});
  }

  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  SignalEvents signals_;  // first: ranks are spawned with the signals blocked, like in cohortrun
  Sink out_, err_;
};

// A StartCheck whose ranks start when told to.
class FakeStart : public StartCheck {
 public:
  bool started() override {
    ++calls;
    return done;
  }
  std::string describe_missing() override { return "rank 1 on nowhere did not start"; }
  bool done = false;
  int calls = 0;
};

TEST_F(SupervisorTest, RanksThatDoNotStartInTimeStopTheJob) {
  const auto start = Clock::now();
  FakeStart check;
  Supervisor s(options(), signals_);
  s.add(0, sh("sleep 30"));
  s.add(1, sh("sleep 30"), "nowhere");
  s.watch_start(check, 0.3);
  const SupervisionResult r = s.run();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.reason, StopReason::start_timeout);
  EXPECT_EQ(r.start_error, "rank 1 on nowhere did not start");
  EXPECT_GE(check.calls, 2);  // asked repeatedly until the deadline
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[1].host, "nowhere");
  for (const RankRecord& rank : r.ranks) EXPECT_EQ(rank.signal_sent, SIGTERM);
  EXPECT_EQ(exit_code(r), 1);
}

// A FIFO for a handshake with a rank: opening one end waits for the other.
std::string make_fifo(const testing::TempDir& dir, const std::string& name) {
  const std::string path = dir.path() + "/" + name;
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

TEST_F(SupervisorTest, StartedRanksRunToTheirEnd) {
  // The rank ends only after the supervisor's first start check, which
  // releases it through a FIFO: the check is made while it runs, however
  // late the supervisor's loop begins.
  struct ReleasingStart : FakeStart {
    std::string fifo;
    bool started() override {
      if (calls == 0) std::ofstream(fifo) << "go\n";  // waits for the rank to open its end
      return FakeStart::started();
    }
  };
  testing::TempDir dir;
  ReleasingStart check;
  check.fifo = make_fifo(dir, "go");
  check.done = true;
  Supervisor s(options(), signals_);
  s.add(0, sh("read x < " + check.fifo + "; echo done"));
  s.watch_start(check, 0.1);
  const SupervisionResult r = s.run();
  EXPECT_EQ(r.reason, StopReason::none);
  EXPECT_EQ(check.calls, 1);  // not asked again once started
  EXPECT_EQ(out_.take(), "[0] done\n");
}

TEST_F(SupervisorTest, AStdinPipeIsClosedWhenItsRankEnds) {
  Supervisor s(options(), signals_);
  SpawnedProcess p = spawn_process(
      {.path = "/bin/sh", .argv = {"sh", "-c", "true"}, .envp = {"PATH=/bin:/usr/bin"}, .stdin_pipe = true});
  const int fd = p.stdin_fd;
  s.add(0, p);
  s.run();
  // The descriptor number is free again (closed by the supervisor).
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);
}

TEST_F(SupervisorTest, AllRanksSucceed) {
  Supervisor s(options(), signals_);
  s.add(0, sh("echo zero; echo warn >&2"));
  s.add(1, sh("printf one"));
  const SupervisionResult r = s.run();
  EXPECT_EQ(r.reason, StopReason::none);
  ASSERT_EQ(r.ranks.size(), 2u);
  for (const RankRecord& rank : r.ranks) {
    EXPECT_TRUE(rank.ended);
    EXPECT_TRUE(rank.status.success());
    EXPECT_EQ(rank.signal_sent, 0);
  }
  const std::string out = out_.take();
  EXPECT_NE(out.find("[0] zero\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[1] one\n"), std::string::npos) << out;
  EXPECT_EQ(err_.take(), "[0] warn\n");
  EXPECT_EQ(r.ranks[0].tail.lines(), (std::deque<std::string>{"zero", "warn"}));
}

TEST_F(SupervisorTest, FailureStopsTheOtherRanks) {
  const auto start = Clock::now();
  Supervisor s(options(), signals_);
  s.add(0, sh("exec sleep 30"));
  s.add(1, sh("echo bye; exit 3"));
  const SupervisionResult r = s.run();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.reason, StopReason::rank_failed);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.ranks[1].status.code(), 3);
  EXPECT_EQ(r.ranks[1].tail.lines(), std::deque<std::string>{"bye"});
  EXPECT_EQ(r.ranks[0].status.signal(), SIGTERM);
  EXPECT_EQ(r.ranks[0].signal_sent, SIGTERM);
}

TEST_F(SupervisorTest, GracePeriodEndsInSigkill) {
  // Rank 1 fails only once rank 0 ignores SIGTERM (it says so through a
  // FIFO): the SIGTERM that rank 1's failure sends cannot end rank 0.
  testing::TempDir dir;
  const std::string ready = make_fifo(dir, "ready");
  const auto start = Clock::now();
  Supervisor s(options(), signals_);
  s.add(0, sh("trap '' TERM; echo ready > " + ready + "; while :; do sleep 0.05; done"));
  s.add(1, sh("read x < " + ready + "; exit 1"));
  const SupervisionResult r = s.run();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.ranks[0].status.signal(), SIGKILL);
  EXPECT_EQ(r.ranks[0].signal_sent, SIGKILL);
}

TEST_F(SupervisorTest, DescendantsHoldingPipesAreKilledAfterAFailure) {
  const auto start = Clock::now();
  Supervisor s(options(), signals_);
  // The background sleep keeps the rank's stdout open after the rank exits.
  s.add(0, sh("sleep 30 & echo $! ; exit 2"));
  const SupervisionResult r = s.run();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.reason, StopReason::rank_failed);
  ASSERT_EQ(r.ranks[0].tail.lines().size(), 1u);
  const pid_t child = std::stoi(r.ranks[0].tail.lines()[0]);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (testing::process_alive(child) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(testing::process_alive(child));
}

TEST_F(SupervisorTest, LingeringPipesAfterSuccessEndTheRunAfterTheDrainTime) {
  const auto start = Clock::now();
  Supervisor s(options(), signals_);
  s.add(0, sh("sleep 30 & echo done"));
  const SupervisionResult r = s.run();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.reason, StopReason::none);
  EXPECT_EQ(out_.take(), "[0] done\n");
  ::kill(-r.ranks[0].pid, SIGKILL);  // the job succeeded; its leftovers are this test's to clean
}

TEST_F(SupervisorTest, StopEndsALaunchThatFailedPartway) {
  Supervisor s(options(), signals_);
  s.add(0, sh("exec sleep 30"));
  s.stop();
  const SupervisionResult r = s.run();
  EXPECT_EQ(r.reason, StopReason::launch_failed);
  EXPECT_EQ(r.ranks[0].status.signal(), SIGTERM);
}

TEST_F(SupervisorTest, LauncherSignalIsForwardedAndASecondOneKills) {
  testing::TempDir dir;
  const std::string ready = dir.path() + "/ready";
  Supervisor s(options(), signals_);
  const SpawnedProcess sleeper = sh("exec sleep 30");
  s.add(0, sleeper);
  s.add(1, sh("trap '' INT; touch " + ready + "; while :; do sleep 0.05; done"));
  // Signals sent to this process wait in the supervisor's signalfd (they are
  // blocked here). Standard signals do not queue, so the second is sent only
  // once the first has visibly been forwarded (rank 0 died of it). The
  // supervisor may not have reaped rank 0 yet when the second arrives; it
  // reaps before acting on a signal, so it still counts one rank.
  // The first was received before rank 0 died of it, so a second sent one
  // signal window after that arrives outside the window (a second request).
  std::thread sender([&] {
    while (::access(ready.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(::getpid(), SIGINT);
    while (testing::process_alive(sleeper.pid)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::duration<double>(SupervisorOptions{}.signal_window_s));
    ::kill(::getpid(), SIGINT);
  });
  const SupervisionResult r = s.run();
  sender.join();
  EXPECT_EQ(r.reason, StopReason::signal);
  EXPECT_EQ(r.signal, SIGINT);
  EXPECT_EQ(r.ranks[0].status.signal(), SIGINT);
  EXPECT_EQ(r.ranks[1].status.signal(), SIGKILL);
  const std::string messages = err_.take();
  EXPECT_NE(messages.find("got SIGINT; forwarding it to 2 rank(s)"), std::string::npos) << messages;
  EXPECT_NE(messages.find("got SIGINT again; killing 1 rank(s)"), std::string::npos) << messages;
}

TEST_F(SupervisorTest, CopiesOfOneSignalWithinTheWindowAreOneRequestAndRanksKeepTheirGrace) {
  // `timeout` signals cohortrun, then its whole process group: the second
  // copy must not kill the ranks while they save. Rank 1 saves for 0.3 s
  // after SIGTERM; the second SIGTERM arrives meanwhile, within the window
  // (60 s here, so the order of events alone decides).
  testing::TempDir dir;
  const std::string ready = dir.path() + "/ready", saved = dir.path() + "/saved";
  SupervisorOptions o = options();
  o.signal_window_s = 60;
  o.verbose = true;
  Supervisor s(o, signals_);
  const SpawnedProcess sleeper = sh("exec sleep 30");
  s.add(0, sleeper);
  s.add(1, sh("trap 'sleep 0.3; touch " + saved + "; exit 0' TERM; touch " + ready + "; while :; do sleep 0.05; done"));
  std::thread sender([&] {
    while (::access(ready.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(::getpid(), SIGTERM);
    while (testing::process_alive(sleeper.pid)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(::getpid(), SIGTERM);  // rank 1 is still saving
  });
  const SupervisionResult r = s.run();
  sender.join();
  EXPECT_EQ(r.reason, StopReason::signal);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_EQ(r.ranks[0].status.signal(), SIGTERM);
  EXPECT_TRUE(r.ranks[1].status.success()) << describe(r.ranks[1].status);
  EXPECT_EQ(::access(saved.c_str(), F_OK), 0) << "rank 1 did not get to save";
  const std::string messages = err_.take();
  EXPECT_NE(messages.find("got SIGTERM again within 60 s: the same request to stop"), std::string::npos) << messages;
  EXPECT_EQ(messages.find("killing"), std::string::npos) << messages;
}

TEST_F(SupervisorTest, RanksIgnoringAForwardedSignalAreKilledAfterTheSignalGracePeriod) {
  testing::TempDir dir;
  const std::string ready = dir.path() + "/ready";
  Supervisor s(options(/*signal_grace_s=*/0.5), signals_);
  s.add(0, sh("exec sleep 30"));
  s.add(1, sh("trap '' TERM; touch " + ready + "; while :; do sleep 0.05; done"));
  std::thread sender([&] {
    while (::access(ready.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(::getpid(), SIGTERM);  // once: only the grace period can end rank 1
  });
  const auto start = Clock::now();
  const SupervisionResult r = s.run();
  sender.join();
  EXPECT_LT(seconds_since(start), kBoundSeconds);
  EXPECT_EQ(r.reason, StopReason::signal);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_DOUBLE_EQ(r.grace_s, 0.5);
  EXPECT_EQ(r.ranks[0].status.signal(), SIGTERM);
  EXPECT_FALSE(r.ranks[0].killed_after_grace);
  EXPECT_EQ(r.ranks[1].status.signal(), SIGKILL);
  EXPECT_TRUE(r.ranks[1].killed_after_grace);
  const std::string messages = err_.take();
  EXPECT_NE(messages.find("killed if still running in 0.5 s"), std::string::npos) << messages;
  EXPECT_NE(messages.find("grace period of 0.5 s over; killing 1 rank(s)"), std::string::npos) << messages;
}

}  // namespace
}  // namespace cohort::launcher::supervisor_test
