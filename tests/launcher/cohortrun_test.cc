// End-to-end tests of the cohortrun binary, with rank_helper as the ranks.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "cohort/launcher/supervisor.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::testing {
namespace {

using namespace std::chrono_literals;

// Generous bound for "stopped within 5 s": a loaded machine must not make
// this flaky; a launcher that does not fail fast waits 60 s and fails it.
constexpr double kStopBoundSeconds = 15;

class CohortrunTest : public ::testing::Test {
 protected:
  // cohortrun -np n [flags] rank_helper actions...
  std::vector<std::string> args(int n, std::vector<std::string> flags, std::vector<std::string> actions) {
    std::vector<std::string> a{"-np", std::to_string(n), "--env", "HELPER_DIR=" + dir_.path()};
    a.insert(a.end(), flags.begin(), flags.end());
    a.push_back(RANK_HELPER_PATH);
    a.insert(a.end(), actions.begin(), actions.end());
    return a;
  }

  RunResult run(int n, std::vector<std::string> flags, std::vector<std::string> actions,
                std::map<std::string, std::string> env = {}) {
    CohortrunProcess p(COHORTRUN_PATH, args(n, flags, actions), dir_.path(), env);
    return p.wait();
  }

  RunResult run_raw(const std::vector<std::string>& a) {
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
    return p.wait();
  }

  // Every pid must be gone: cohortrun reaps its ranks before it exits.
  // `expected` pins the count, so that a list that came back short (or
  // empty) cannot pass by checking nothing.
  static void expect_all_gone(const std::vector<pid_t>& pids, size_t expected) {
    ASSERT_EQ(pids.size(), expected) << "the ranks' pid files";
    for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "rank process " << pid << " survived";
  }

  TempDir dir_;
};

// Values each rank printed with the helper's "env" action, by rank.
std::map<int, std::map<std::string, std::string>> parse_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  const std::regex line(R"(\[(\d+)\] ([A-Z_]+)=(.*))");
  for (const std::string& l : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (const std::string& l : split_lines(text)) n += l.starts_with(prefix) ? 1 : 0;
  return n;
}

int test_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  return std::max(1, CPU_COUNT(&set));
}

class CohortrunSizes : public CohortrunTest, public ::testing::WithParamInterface<int> {};

TEST_P(CohortrunSizes, PrefixesEveryLineAndExitsZero) {
  const int n = GetParam();
  const RunResult r = run(n, {}, {"out:hello", "err:oops", "partial:no newline"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < n; ++rank) {
    const std::string p = "[" + std::to_string(rank) + "] ";
    EXPECT_EQ(count_lines_starting(r.out, p + "hello"), 1) << r.out;
    EXPECT_EQ(count_lines_starting(r.out, p + "no newline"), 1) << r.out;
    EXPECT_EQ(count_lines_starting(r.err, p + "oops"), 1) << r.err;
  }
  // Nothing else, and stderr lines stay on stderr.
  EXPECT_EQ(split_lines(r.out).size(), 2u * n) << r.out;
  EXPECT_EQ(split_lines(r.err).size(), 1u * n) << r.err;
  EXPECT_EQ(r.out.find("oops"), std::string::npos);
  EXPECT_TRUE(r.out.ends_with("\n"));
}

TEST_P(CohortrunSizes, SetsTheRankEnvironment) {
  const int n = GetParam();
  const RunResult r = run(n, {"--backend", "shm", "--env", "FOO=bar=baz"}, {"env"});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto env = parse_env(r.out);
  ASSERT_EQ(static_cast<int>(env.size()), n) << r.out;
  const std::string threads = std::to_string(std::max(1, test_cores() / n));
  const auto& first = env.at(0);
  const std::regex address(R"(127\.0\.0\.1:(\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(first.at("COHORT_STORE_ADDR"), m, address)) << first.at("COHORT_STORE_ADDR");
  const std::string port = m[1];
  EXPECT_NE(port, "0");
  EXPECT_TRUE(std::regex_match(first.at("COHORT_JOB_ID"), std::regex("[0-9a-f]{22}"))) << first.at("COHORT_JOB_ID");
  EXPECT_TRUE(std::regex_match(first.at("COHORT_SECRET"), std::regex("[0-9a-f]{64}"))) << first.at("COHORT_SECRET");
  for (int rank = 0; rank < n; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto& e = env.at(rank);
    const std::string rs = std::to_string(rank), ns = std::to_string(n);
    EXPECT_EQ(e.at("COHORT_RANK"), rs);
    EXPECT_EQ(e.at("COHORT_SIZE"), ns);
    EXPECT_EQ(e.at("COHORT_LOCAL_RANK"), rs);
    EXPECT_EQ(e.at("COHORT_LOCAL_SIZE"), ns);
    EXPECT_EQ(e.at("RANK"), rs);
    EXPECT_EQ(e.at("WORLD_SIZE"), ns);
    EXPECT_EQ(e.at("LOCAL_RANK"), rs);
    EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), ns);
    // torch.distributed's master: rank 0's host (this one, all ranks local)
    // and a port free there, the same for every rank, never the store's.
    EXPECT_EQ(e.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(e.at("MASTER_PORT"), first.at("MASTER_PORT"));
    EXPECT_NE(e.at("MASTER_PORT"), port);
    EXPECT_GT(std::stoi(e.at("MASTER_PORT")), 0);
    EXPECT_EQ(e.at("COHORT_STORE_ADDR"), first.at("COHORT_STORE_ADDR"));
    EXPECT_EQ(e.at("COHORT_JOB_ID"), first.at("COHORT_JOB_ID"));
    EXPECT_EQ(e.at("COHORT_SECRET"), first.at("COHORT_SECRET"));
    EXPECT_EQ(e.at("COHORT_BACKEND"), "shm");
    EXPECT_EQ(e.at("FOO"), "bar=baz");
    EXPECT_EQ(e.at("OMP_NUM_THREADS"), threads);
    EXPECT_EQ(e.at("OPENBLAS_NUM_THREADS"), threads);
    EXPECT_EQ(e.at("MKL_NUM_THREADS"), threads);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CohortrunSizes, ::testing::Values(1, 2, 3, 4));

TEST_F(CohortrunTest, TimelineReachesEveryRankAsAnAbsolutePath) {
  const RunResult r = run(2, {"--timeline", "trace.json"}, {"env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto by_rank = parse_env(r.out);
  ASSERT_EQ(by_rank.size(), 2u);
  for (const auto& [rank, e] : by_rank) {
    ASSERT_TRUE(e.count("COHORT_TIMELINE")) << r.out;
    EXPECT_EQ(e.at("COHORT_TIMELINE"), (std::filesystem::current_path() / "trace.json").string());
  }
}

TEST_F(CohortrunTest, KeepsThreadCountsTheUserSet) {
  auto env = clean_environment();
  env["OMP_NUM_THREADS"] = "5";
  const RunResult r = run(2, {"--env", "MKL_NUM_THREADS=6"}, {"env"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto by_rank = parse_env(r.out);
  ASSERT_EQ(by_rank.size(), 2u);
  for (const auto& [rank, e] : by_rank) {
    EXPECT_EQ(e.at("OMP_NUM_THREADS"), "5");
    EXPECT_EQ(e.at("MKL_NUM_THREADS"), "6");
    EXPECT_EQ(e.at("OPENBLAS_NUM_THREADS"), std::to_string(std::max(1, test_cores() / 2)));
  }
  // Without --backend, COHORT_BACKEND is left alone.
  EXPECT_NE(r.out.find("[0] COHORT_BACKEND unset"), std::string::npos) << r.out;
}

TEST_F(CohortrunTest, AnElasticHeartbeatTimeoutTheBeatsCannotMeetIsRefused) {
  // Beats every 0.5 s and a 0.6 s timeout: one late beat would kill a rank.
  auto env = clean_environment();
  env["COHORT_ELASTIC_HEARTBEAT_MS"] = "500";
  env["COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S"] = "0.6";
  const RunResult r = run(2, {"--min-np", "1"}, {"env"}, env);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=0.6 must be 0 (off) or at least twice "
                       "COHORT_ELASTIC_HEARTBEAT_MS (0.5 s)"),
            std::string::npos)
      << r.err;
}

TEST_F(CohortrunTest, JobIdsDifferBetweenRunsAndCanBeChosen) {
  const RunResult a = run(1, {}, {"env"});
  const RunResult b = run(1, {}, {"env"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(parse_env(a.out)[0].at("COHORT_JOB_ID"), parse_env(b.out)[0].at("COHORT_JOB_ID"));
  EXPECT_NE(parse_env(a.out)[0].at("COHORT_SECRET"), parse_env(b.out)[0].at("COHORT_SECRET"));
  const RunResult c = run(1, {"--job-id", "my_job.7"}, {"env"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(parse_env(c.out)[0].at("COHORT_JOB_ID"), "my_job.7");
}

// A listening socket on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd, 1), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
  int fd = -1;
  int port = 0;
};

TEST_F(CohortrunTest, PortFlagChoosesTheStorePort) {
  int port = 0;
  {
    Listener probe;  // a port that was free a moment ago
    port = probe.port;
  }
  const RunResult r = run(2, {"--port", std::to_string(port)}, {"env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)[1].at("COHORT_STORE_ADDR"), "127.0.0.1:" + std::to_string(port));
  EXPECT_NE(parse_env(r.out)[1].at("MASTER_PORT"), std::to_string(port));  // torch's master is not the store
}

TEST_F(CohortrunTest, PortInUseIsReported) {
  Listener busy;
  const RunResult r = run(2, {"--port", std::to_string(busy.port)}, {"env"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("cohortrun: error: cannot start the store"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(busy.port)), std::string::npos) << r.err;
}

TEST_F(CohortrunTest, RanksInheritOnlyStandardDescriptorsAndNullStdin) {
  const RunResult r = run(2, {}, {"fds", "stdin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "[0] fds: none"), 1) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "[1] fds: none"), 1) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "[1] stdin: eof"), 1) << r.out;
}

TEST_F(CohortrunTest, ForwardsLongOutputCompletelyAndInOrder) {
  constexpr int kLines = 20000;
  const RunResult r = run(2, {}, {"lines:" + std::to_string(kLines)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int next[2] = {0, 0};
  for (const std::string& l : split_lines(r.out)) {
    const int rank = l[1] - '0';
    ASSERT_TRUE(rank == 0 || rank == 1) << l;
    ASSERT_EQ(l, "[" + std::to_string(rank) + "] line " + std::to_string(next[rank])) << "out of order";
    ++next[rank];
  }
  EXPECT_EQ(next[0], kLines);
  EXPECT_EQ(next[1], kLines);
}

TEST_F(CohortrunTest, RankOutputArrivesLineByLineWhileTheRankRuns) {
  // The ranks print a line with printf and, without flushing, wait for the
  // test: the line can only be seen if their stdout writes each line as it
  // ends. Then they print another.
  CohortrunProcess p(COHORTRUN_PATH, args(2, {}, {"out:first", "wait-file:go", "out:second"}), dir_.path());
  const bool seen = p.wait_for_output({"[0] first", "[1] first"});
  const std::string before = read_text(dir_.path() + "/cohortrun.out");
  std::ofstream(dir_.path() + "/go") << "1";
  const RunResult r = p.wait();
  ASSERT_TRUE(seen) << "the first lines did not arrive while the ranks ran:\n" << r.out << r.err;
  EXPECT_EQ(before.find("second"), std::string::npos) << before;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "[0] second"), 1) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "[1] second"), 1) << r.out;
}

TEST_F(CohortrunTest, RanksStdoutIsATerminalUnlessOutputPipeIsAsked) {
  const RunResult pty = run(2, {}, {"tty", "out:a", "out:b"});
  ASSERT_EQ(pty.exit_code, 0) << pty.err;
  EXPECT_EQ(count_lines_starting(pty.out, "[1] stdout: tty"), 1) << pty.out;
  EXPECT_EQ(count_lines_starting(pty.out, "[1] stderr: pipe"), 1) << "stderr stays a pipe: " << pty.out;
  EXPECT_EQ(pty.out.find('\r'), std::string::npos) << "no \\r\\n from the terminal: " << pty.out;
  const RunResult pipe = run(2, {"--output", "pipe"}, {"tty"});
  ASSERT_EQ(pipe.exit_code, 0) << pipe.err;
  EXPECT_EQ(count_lines_starting(pipe.out, "[1] stdout: pipe"), 1) << pipe.out;
  // Either way, stderr reaches cohortrun's stderr, stdout its stdout.
  for (const std::string mode : {"pty", "pipe"}) {
    const RunResult r = run(1, {"--output", mode}, {"out:to stdout", "err:to stderr"});
    EXPECT_EQ(r.out, "[0] to stdout\n") << mode;
    EXPECT_NE(r.err.find("[0] to stderr\n"), std::string::npos) << mode << ": " << r.err;
  }
}

class CohortrunOutputModes : public CohortrunTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CohortrunOutputModes, AKilledRanksHalfLineStaysALineOfItsOwn) {
  // Rank 1 prints half a line and is killed once the others have printed
  // theirs: every line of the output is one rank's, whole.
  const RunResult r = run(3, {"--output", GetParam()},
                          {"@0:lines:300", "@2:lines:300", "@1:out:whole", "@1:partial:half", "barrier",
                           "@1:kill:9", "sleep:60"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  const std::regex whole_line(R"(\[[02]\] line \d+|\[1\] whole|\[1\] half)");
  for (const std::string& l : split_lines(r.out)) EXPECT_TRUE(std::regex_match(l, whole_line)) << l;
  EXPECT_EQ(count_lines_starting(r.out, "[1] half"), 1) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "[0] line"), 300);
  EXPECT_EQ(count_lines_starting(r.out, "[2] line"), 300);
}

INSTANTIATE_TEST_SUITE_P(Modes, CohortrunOutputModes, ::testing::Values("pty", "pipe"));

TEST_F(CohortrunTest, RanksReachTheStoreWithTheSecret) {
  const RunResult r = run(3, {}, {"store"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(count_lines_starting(r.out, "[" + std::to_string(rank) + "] store ok"), 1) << r.out << r.err;
}

TEST_F(CohortrunTest, NonZeroExitIsReportedAndStopsTheOthers) {
  CohortrunProcess p(COHORTRUN_PATH,
                     args(3, {}, {"pid", "barrier", "@1:out:about to fail", "@1:exit:3", "sleep:60"}),
                     dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 3);
  const RunResult r = p.wait();
  ASSERT_EQ(pids.size(), 3u) << r.err;
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1] about to fail"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0 was stopped by cohortrun (SIGTERM)"), std::string::npos) << r.err;
  expect_all_gone(pids, 3);
}

TEST_F(CohortrunTest, ExitStatusesAreSeenWhenStartedWithSigchldIgnored) {
  CohortrunProcess p(COHORTRUN_PATH, args(2, {}, {"@1:exit:3", "@0:sleep:60"}), dir_.path(), {}, true);
  const RunResult r = p.wait(std::chrono::duration<double>(kStopBoundSeconds));
  ASSERT_TRUE(r.finished) << "cohortrun never saw the ranks end";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
}

TEST_F(CohortrunTest, RankKilledBySigkillStopsTheOthersAndIsNamed) {
  CohortrunProcess p(COHORTRUN_PATH,
                     args(4, {}, {"pid", "barrier", "@2:out:last words", "@2:kill:9", "sleep:60"}),
                     dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 4);
  const RunResult r = p.wait();
  ASSERT_EQ(pids.size(), 4u) << r.err;
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_NE(r.err.find("rank 2 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[2] last words"), std::string::npos) << r.err;
  expect_all_gone(pids, 4);
}

TEST_F(CohortrunTest, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  CohortrunProcess p(COHORTRUN_PATH,
                     args(2, {"--grace-s", "0.5"}, {"pid", "ignore:TERM", "barrier", "@1:exit:5", "sleep:60"}),
                     dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 2);
  const RunResult r = p.wait();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_NE(r.err.find("rank 1 exited with code 5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0 was stopped by cohortrun (SIGKILL)"), std::string::npos) << r.err;
  expect_all_gone(pids, 2);
}

TEST_F(CohortrunTest, DescendantsOfRanksAreStoppedOnFailure) {
  CohortrunProcess p(COHORTRUN_PATH,
                     args(2, {}, {"spawn-child", "pid", "barrier", "@1:exit:2", "sleep:60"}),
                     dir_.path());
  const std::vector<pid_t> children = wait_for_pids(dir_.path(), "child.", 2);
  const RunResult r = p.wait();
  ASSERT_EQ(children.size(), 2u) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  // The grandchildren were not reaped by cohortrun; allow their new parent a
  // moment to collect them.
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline &&
         std::any_of(children.begin(), children.end(), [](pid_t c) { return process_alive(c); }))
    std::this_thread::sleep_for(10ms);
  for (pid_t c : children) EXPECT_FALSE(process_alive(c)) << "grandchild " << c << " survived";
}

class CohortrunSignals : public CohortrunTest, public ::testing::WithParamInterface<int> {};

TEST_P(CohortrunSignals, SignalToCohortrunStopsEveryRank) {
  const int signo = GetParam();
  CohortrunProcess p(COHORTRUN_PATH, args(3, {}, {"pid", "barrier", "sleep:60"}), dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 3);
  ASSERT_EQ(pids.size(), 3u);
  p.signal(signo);
  const RunResult r = p.wait();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 128 + signo) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_NE(r.err.find("stopped by SIG" + std::string(sigabbrev_np(signo))), std::string::npos) << r.err;
  expect_all_gone(pids, 3);
}

INSTANTIATE_TEST_SUITE_P(Signals, CohortrunSignals, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

TEST_F(CohortrunTest, SecondSignalKillsRanksThatIgnoreTheFirst) {
  // "ignore" before "pid": once the test sees a rank's pid, it ignores SIGTERM.
  CohortrunProcess p(COHORTRUN_PATH, args(2, {}, {"ignore:TERM", "pid", "barrier", "sleep:60"}), dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 2);
  ASSERT_EQ(pids.size(), 2u);
  p.signal(SIGTERM);
  // Standard signals do not queue: the second is sent only once cohortrun
  // has taken the first (it says so), or the two could arrive as one.
  ASSERT_TRUE(p.wait_for_error_text("got SIGTERM; forwarding it to 2 rank(s)")) << p.wait().err;
  // The ranks ignore SIGTERM, so nothing ended them: the second signal
  // finds both still running. It comes after cohortrun's signal window,
  // within which a second copy counts as the same signal.
  EXPECT_TRUE(p.running());
  EXPECT_TRUE(process_alive(pids[0]));
  std::this_thread::sleep_for(std::chrono::duration<double>(SupervisorOptions{}.signal_window_s));
  p.signal(SIGTERM);
  const RunResult r = p.wait();
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("again; killing 2 rank(s)"), std::string::npos) << r.err;
  expect_all_gone(pids, 2);
}

TEST_F(CohortrunTest, OneSigtermFromTimeoutLeavesTheRanksTheirGracePeriod) {
  // timeout signals cohortrun and then its whole process group, cohortrun
  // in it: two copies of one SIGTERM, which must not count as a second
  // signal (that kills the ranks at once). The ranks trap SIGTERM, save for
  // 0.3 s and exit 0. (On a loaded machine the two copies usually merge
  // into one before cohortrun reads them; the supervisor's unit test
  // CopiesOfOneSignalWithinTheWindowAreOneRequest... delivers them apart.)
  const std::string script =
      "trap 'sleep 0.3; echo saved > \"$HELPER_DIR/saved.$COHORT_RANK\"; exit 0' TERM; "
      "echo ready > \"$HELPER_DIR/ready.$COHORT_RANK\"; while :; do sleep 0.05; done";
  CohortrunProcess p(
      "/usr/bin/timeout",
      {"-s", "TERM", "3", COHORTRUN_PATH, "-np", "2", "--env", "HELPER_DIR=" + dir_.path(), "/bin/sh", "-c", script},
      dir_.path());
  const RunResult r = p.wait();
  ASSERT_TRUE(r.finished);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(read_text(dir_.path() + "/ready." + std::to_string(rank)), "ready\n")
        << "rank " << rank << " was not running when timeout fired:\n"
        << r.err;
    EXPECT_EQ(read_text(dir_.path() + "/saved." + std::to_string(rank)), "saved\n")
        << "rank " << rank << " did not get its grace period:\n"
        << r.err;
  }
  EXPECT_EQ(r.exit_code, 124) << r.err;  // timeout's code for "timed out"
  EXPECT_NE(r.err.find("2 of 2 rank(s) exited with code 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("killing"), std::string::npos) << r.err;
}

std::vector<std::string> shm_entries(const std::string& prefix);

TEST_F(CohortrunTest, RanksIgnoringAForwardedSignalAreKilledAfterTheSignalGracePeriod) {
  const std::string job = "sg" + std::to_string(getpid());
  // SIGTERM is ignored before the pid file says the rank is ready: in the
  // other order, a SIGTERM sent between the two ended the rank at once.
  CohortrunProcess p(COHORTRUN_PATH,
                     args(2, {"--signal-grace-s", "1", "--job-id", job}, {"shm", "ignore:TERM", "pid", "barrier", "sleep:60"}),
                     dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 2);
  ASSERT_EQ(pids.size(), 2u);
  p.signal(SIGTERM);  // once: only the grace period can end the ranks
  const RunResult r = p.wait();
  ASSERT_TRUE(r.finished);
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("grace period of 1 s over; killing 2 rank(s)"), std::string::npos) << r.err;
  // The report is still written, naming the ranks that had to be killed.
  EXPECT_NE(r.err.find("stopped by SIGTERM; 0 of 2 rank(s) exited with code 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("were still running 1 s after SIGTERM (--signal-grace-s) and killed with SIGKILL"),
            std::string::npos)
      << r.err;
  expect_all_gone(pids, 2);
  EXPECT_NE(r.out.find("[1] shm created /dev/shm/cohort-" + job + "-test-"), std::string::npos) << r.out;
  EXPECT_TRUE(shm_entries("cohort-" + job + "-").empty()) << "a segment of the killed ranks was left";
}

TEST_F(CohortrunTest, KilledCohortrunLeavesNoOrphans) {
  CohortrunProcess p(COHORTRUN_PATH, args(3, {}, {"pid", "barrier", "sleep:60"}), dir_.path());
  const std::vector<pid_t> pids = wait_for_pids(dir_.path(), "pid.", 3);
  ASSERT_EQ(pids.size(), 3u);
  p.signal(SIGKILL);
  const RunResult r = p.wait();
  EXPECT_EQ(r.signal, SIGKILL);
  const auto deadline = Clock::now() + std::chrono::duration<double>(kStopBoundSeconds);
  while (Clock::now() < deadline && std::any_of(pids.begin(), pids.end(), [](pid_t q) { return process_alive(q); }))
    std::this_thread::sleep_for(10ms);
  for (pid_t q : pids) EXPECT_FALSE(process_alive(q)) << "orphaned rank " << q;
}

std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d))
      if (std::string_view(e->d_name).starts_with(prefix)) names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

class CohortrunShm : public CohortrunTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CohortrunShm, RemovesTheJobsLeftoverSharedMemoryOnly) {
  const bool crash = GetParam();
  const std::string job = "lt" + std::to_string(getpid()) + (crash ? "c" : "s");
  // Another job's segment whose id starts with ours must survive.
  const std::string other = "/dev/shm/cohort-" + job + "x-keep";
  close(open(other.c_str(), O_CREAT | O_WRONLY, 0600));
  std::vector<std::string> actions{"shm", "barrier"};
  if (crash) actions.insert(actions.end(), {"@1:kill:9", "sleep:60"});
  const RunResult r = run(3, {"--job-id", job}, actions);
  EXPECT_EQ(r.exit_code, crash ? 128 + SIGKILL : 0) << r.err;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.out.find("[" + std::to_string(rank) + "] shm created /dev/shm/cohort-" + job + "-test-"),
              std::string::npos)
        << r.out << r.err;
  EXPECT_TRUE(shm_entries("cohort-" + job + "-").empty());
  struct stat st;
  EXPECT_EQ(stat(other.c_str(), &st), 0) << "cohortrun removed another job's segment";
  unlink(other.c_str());
}

INSTANTIATE_TEST_SUITE_P(Endings, CohortrunShm, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "AfterCrash" : "AfterSuccess"; });

TEST_F(CohortrunTest, ReportsTheLastTwentyLinesOfTheFailedRank) {
  const RunResult r = run(1, {}, {"lines:100", "exit:4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("rank 0 exited with code 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("last 20 line(s) of rank 0 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[0] line 80\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[0] line 99\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[0] line 79\n"), std::string::npos) << r.err;
}

TEST_F(CohortrunTest, MissingProgramIsReported) {
  const RunResult r = run_raw({"-np", "2", "no_such_program_for_cohortrun"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute 'no_such_program_for_cohortrun': not found"), std::string::npos) << r.err;
  const RunResult abs = run_raw({"-np", "2", "/nonexistent/prog"});
  EXPECT_EQ(abs.exit_code, 127);
  EXPECT_NE(abs.err.find("/nonexistent/prog"), std::string::npos) << abs.err;
}

TEST_F(CohortrunTest, NonExecutableProgramIsReported) {
  const std::string path = dir_.path() + "/not_executable";
  close(open(path.c_str(), O_CREAT | O_WRONLY, 0644));
  const RunResult r = run_raw({"-np", "1", path});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find("cannot execute '" + path + "'"), std::string::npos) << r.err;
}

TEST_F(CohortrunTest, HelpListsFlagsAndTunables) {
  const RunResult r = run_raw({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* text : {"usage: cohortrun -np N", "--backend", "--env", "--grace-s", "COHORT_TIMEOUT_S",
                           "COHORT_LOG_LEVEL", "exit status"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
}

class CohortrunBadFlags : public CohortrunTest,
                          public ::testing::WithParamInterface<std::vector<std::string>> {};

TEST_P(CohortrunBadFlags, PrintOneLineAndExitTwo) {
  const RunResult r = run_raw(GetParam());
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const auto lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_TRUE(lines[0].starts_with("cohortrun: error: ")) << lines[0];
  EXPECT_NE(lines[0].find("--help"), std::string::npos) << lines[0];
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CohortrunBadFlags,
    ::testing::Values(std::vector<std::string>{}, std::vector<std::string>{"true"},
                      std::vector<std::string>{"-np"}, std::vector<std::string>{"-np", "0", "true"},
                      std::vector<std::string>{"-np", "-2", "true"}, std::vector<std::string>{"-np", "two", "true"},
                      std::vector<std::string>{"-np", "2"}, std::vector<std::string>{"--bogus", "-np", "2", "true"},
                      std::vector<std::string>{"-np", "2", "--env", "NOEQUALS", "true"},
                      std::vector<std::string>{"-np", "2", "--env", "COHORT_RANK=1", "true"},
                      std::vector<std::string>{"-np", "2", "--backend", "nccl", "true"},
                      std::vector<std::string>{"-np", "2", "--port", "70000", "true"},
                      std::vector<std::string>{"-np", "2", "--job-id", "a/b", "true"},
                      std::vector<std::string>{"-np", "2", "--grace-s", "soon", "true"},
                      std::vector<std::string>{"-np", "2", "--output", "tty", "true"}));

}  // namespace
}  // namespace cohort::launcher::testing
