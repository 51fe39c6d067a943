// End-to-end tests of multi-host cohortrun that need no second machine and
// no privileges: the launch template `env COHORT_TEST_HOST={host}` runs each
// "remote" rank's remote end (cohortrun --remote-rank) on this machine, so
// placement, the payload on stdin, the start watch, exit codes and fail-fast
// across hosts run through the same code as with ssh. The network-namespace
// version of these paths is tests/cluster.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::testing {
namespace {

using namespace std::chrono_literals;

constexpr double kStopBoundSeconds = 15;
const std::string kEnvTemplate = "env COHORT_TEST_HOST={host}";
// Like ssh, the remote end outlives the launch command: setsid puts it in a
// session of its own (no signal from the launcher reaches it) and it keeps the
// command's stdin, whose end is all it learns.
// The "remote" hosts: loopback addresses other than 127.0.0.1, so that the
// template's ranks, which run here, reach the store at 127.0.0.1 (cohortrun
// refuses a loopback store address for hosts that are other machines).
const std::string kA = "127.0.0.2", kB = "127.0.0.3", kC = "127.0.0.4";
const std::string kDetachedTemplate = "sh -c 'exec 3<&0; setsid \"$@\" <&3 & wait $!' {host}";

std::map<int, std::map<std::string, std::string>> parse_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  const std::regex line(R"(\[(\d+)\] ([A-Z_]+)=(.*))");
  for (const std::string& l : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

class MultiHostTest : public ::testing::Test {
 protected:
  RunResult run(std::vector<std::string> flags, std::vector<std::string> actions,
                std::map<std::string, std::string> env = {}, std::chrono::seconds timeout = 60s) {
    std::vector<std::string> a{"--env", "HELPER_DIR=" + dir_.path(), "--store-addr", "127.0.0.1"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.push_back(RANK_HELPER_PATH);
    a.insert(a.end(), actions.begin(), actions.end());
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path(), env);
    return p.wait(timeout);
  }

  TempDir dir_;
};

TEST_F(MultiHostTest, RanksGetTheirHostAndLocalRanks) {
  const RunResult r = run({"-H", kA + ":2," + kB + ":1," + kC + ":2", "--launch-template", kEnvTemplate, "--backend",
                           "gloo", "--network-interface", "eth7"},
                          {"env", "out:two words 'quoted' $HOME"});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto env = parse_env(r.out);
  ASSERT_EQ(env.size(), 5u) << r.out;
  const std::vector<std::tuple<std::string, int, int>> expected{
      {kA, 0, 2}, {kA, 1, 2}, {kB, 0, 1}, {kC, 0, 2}, {kC, 1, 2}};
  for (int rank = 0; rank < 5; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto& e = env.at(rank);
    const auto& [host, local_rank, local_size] = expected[rank];
    EXPECT_EQ(e.at("COHORT_TEST_HOST"), host);  // the template ran for this host
    EXPECT_EQ(e.at("COHORT_HOST"), host);
    EXPECT_EQ(e.at("COHORT_RANK"), std::to_string(rank));
    EXPECT_EQ(e.at("COHORT_SIZE"), "5");
    EXPECT_EQ(e.at("COHORT_LOCAL_RANK"), std::to_string(local_rank));
    EXPECT_EQ(e.at("COHORT_LOCAL_SIZE"), std::to_string(local_size));
    EXPECT_EQ(e.at("LOCAL_RANK"), std::to_string(local_rank));
    EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), std::to_string(local_size));
    EXPECT_EQ(e.at("COHORT_BACKEND"), "gloo");
    EXPECT_EQ(e.at("COHORT_IFACE"), "eth7");
    EXPECT_TRUE(std::regex_match(e.at("COHORT_STORE_ADDR"), std::regex(R"(127\.0\.0\.1:\d+)")));
    EXPECT_EQ(e.at("COHORT_SECRET"), env.at(0).at("COHORT_SECRET"));
    // Arguments arrive as given, blanks and quotes included.
    EXPECT_NE(r.out.find("[" + std::to_string(rank) + "] two words 'quoted' $HOME\n"), std::string::npos) << r.out;
  }
}

TEST_F(MultiHostTest, LocalhostRanksStartDirectlyBesideRemoteOnes) {
  const RunResult r = run({"-H", "localhost:1," + kB + ":1", "--launch-template", kEnvTemplate}, {"env", "store"});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = parse_env(r.out);
  ASSERT_EQ(env.size(), 2u) << r.out;
  EXPECT_FALSE(env[0].contains("COHORT_TEST_HOST"));  // not through the template
  EXPECT_EQ(env[0].at("COHORT_HOST"), "localhost");
  EXPECT_EQ(env[1].at("COHORT_TEST_HOST"), kB);
  EXPECT_EQ(env[1].at("COHORT_HOST"), kB);
  EXPECT_NE(r.out.find("[0] store ok 0 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] store ok 1 of 2"), std::string::npos) << r.out;
}

// torch.distributed's env:// master (torch_master.h): rank 0's host and one
// port for every rank, never the store's. Rank 0 remote: its end chooses and
// publishes it, for the other remote ends and for the ranks the launcher
// starts itself (which wait for it); --env gives the user's.
TEST_F(MultiHostTest, TorchMasterIsChosenWhereRankZeroRuns) {
  for (const std::string& hosts : {kA + ":2," + kB + ":1", kA + ":1,localhost:2"}) {
    SCOPED_TRACE(hosts);
    const RunResult r = run({"-H", hosts, "--launch-template", kEnvTemplate}, {"env"});
    ASSERT_TRUE(r.finished);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto env = parse_env(r.out);
    ASSERT_EQ(env.size(), 3u) << r.out;
    const std::string store_port = env.at(0).at("COHORT_STORE_ADDR").substr(10);  // after "127.0.0.1:"
    for (const auto& [rank, e] : env) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_EQ(e.at("MASTER_ADDR"), "127.0.0.1");  // rank 0's route to the store
      EXPECT_EQ(e.at("MASTER_PORT"), env.at(0).at("MASTER_PORT"));
      EXPECT_NE(e.at("MASTER_PORT"), store_port);
    }
  }
  const RunResult given = run({"-H", kA + ":1,localhost:1", "--launch-template", kEnvTemplate, "--env",
                               "MASTER_ADDR=node0", "--env", "MASTER_PORT=29500"},
                              {"env"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  for (const auto& [rank, e] : parse_env(given.out)) {
    EXPECT_EQ(e.at("MASTER_ADDR"), "node0") << rank;
    EXPECT_EQ(e.at("MASTER_PORT"), "29500") << rank;
  }
}

TEST_F(MultiHostTest, RemoteRanksMeetThroughTheStoreAndTheSecretStaysOffCommandLines) {
  auto env = clean_environment();
  env["COHORT_TIMEOUT_S"] = "17";
  const RunResult r = run({"-H", kA + ":2," + kB + ":2", "--launch-template", kEnvTemplate},
                          {"store", "secret-scan", "env", "cwd"}, env);
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string p = "[" + std::to_string(rank) + "] ";
    EXPECT_NE(r.out.find(p + "store ok " + std::to_string(rank) + " of 4"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "secret on command lines: 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "secret in environment: yes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "cwd " + std::string(cwd) + "\n"), std::string::npos) << r.out;
  }
  // The launcher's tunables reach remote ranks.
  EXPECT_EQ(parse_env(r.out)[3].at("COHORT_TIMEOUT_S"), "17");
}

TEST_F(MultiHostTest, RemoteRanksOutputArrivesLineByLineFromATerminal) {
  // As on the launcher's machine: the program's stdout is a terminal on its
  // host (its remote end relays it), so a line printed without a flush
  // arrives while the rank waits.
  CohortrunProcess p(
      COHORTRUN_PATH,
      {"--env", "HELPER_DIR=" + dir_.path(), "--store-addr", "127.0.0.1", "-H", kA + ":1," + kB + ":1",
       "--launch-template", kEnvTemplate, RANK_HELPER_PATH, "tty", "out:first", "wait-file:go", "out:second"},
      dir_.path());
  const bool seen = p.wait_for_output({"[0] first", "[1] first"});
  std::ofstream(dir_.path() + "/go") << "1";
  const RunResult r = p.wait();
  ASSERT_TRUE(seen) << "the first lines did not arrive while the ranks ran:\n" << r.out << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"[0] stdout: tty", "[1] stdout: tty", "[1] stderr: pipe", "[0] second", "[1] second"})
    EXPECT_NE(r.out.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;

  const RunResult pipe = run({"-H", kA + ":1," + kB + ":1", "--launch-template", kEnvTemplate, "--output", "pipe"},
                             {"tty", "err:to stderr"});
  ASSERT_EQ(pipe.exit_code, 0) << pipe.err;
  EXPECT_NE(pipe.out.find("[1] stdout: pipe\n"), std::string::npos) << pipe.out;
  EXPECT_NE(pipe.err.find("[1] to stderr\n"), std::string::npos) << pipe.err;
}

TEST_F(MultiHostTest, ARemoteFailureStopsEveryHostAndIsReportedWithItsHost) {
  const RunResult r = run({"-H", kA + ":2," + kB + ":2", "--launch-template", kEnvTemplate, "--grace-s", "1"},
                          {"pid", "barrier", "@3:err:giving up", "@3:exit:3", "sleep:60"});
  ASSERT_TRUE(r.finished) << "cohortrun did not stop the other ranks";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  EXPECT_NE(r.err.find("cohortrun: error: rank 3 on " + kB + " exited with code 3; stopped the other 3 rank(s)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("    [3] giving up"), std::string::npos) << r.err;
  const auto pids = wait_for_pids(dir_.path(), "pid.", 4, 1s);
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << pid;
}

TEST_F(MultiHostTest, SignalDeathsComeBack) {
  const RunResult r =
      run({"-H", kA + "," + kB, "--launch-template", kEnvTemplate, "--grace-s", "1"}, {"@1:kill:9", "sleep:60"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("rank 1 on " + kB + " was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
}

TEST_F(MultiHostTest, RanksWhoseLaunchCommandDiesAreStoppedThroughTheirStdin) {
  // rank 0 fails; cohortrun then kills the other launch commands, which
  // cannot pass a signal on: their remote ends see stdin close and stop
  // their ranks, as they would across ssh.
  const RunResult r = run({"-H", kA + ":2," + kB + ":2", "--launch-template", kDetachedTemplate, "--grace-s", "1"},
                          {"pid", "barrier", "@0:exit:5", "sleep:60"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0 on " + kA + " exited with code 5"), std::string::npos) << r.err;
  const auto pids = wait_for_pids(dir_.path(), "pid.", 4, 1s);
  ASSERT_EQ(pids.size(), 4u);
  const auto deadline = Clock::now() + 10s;
  for (pid_t pid : pids) {
    while (process_alive(pid) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(process_alive(pid)) << "rank process " << pid << " outlived its launch command by 10 s";
  }
}

TEST_F(MultiHostTest, RanksThatNeverStartHitTheStartTimeout) {
  // A launch command that never runs cohortrun's remote end (a host that
  // never answers).
  const RunResult r = run({"-H", kA + ":1," + kB + ":2", "--launch-template", "sh -c 'sleep 30' {host}",
                           "--start-timeout", "1", "--grace-s", "1"},
                          {"out:never"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("cohortrun: error: rank 0 on " + kA + ", rank 1 on " + kB + ", rank 2 on " + kB +
                       " did not start within the start "
                       "timeout"),
            std::string::npos)
      << r.err;
}

TEST_F(MultiHostTest, AMissingRemoteProgramIsReportedWithCode127) {
  std::vector<std::string> a{"-H",           kA,          "--launch-template", kEnvTemplate,
                             "--store-addr", "127.0.0.1", "/nonexistent/prog"};
  CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
  const RunResult r = p.wait(30s);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 127) << r.err;  // as --help documents, and as on this machine
  EXPECT_NE(r.err.find("rank 0 on " + kA + " exited with code 127"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot execute '/nonexistent/prog'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cohortrun: error: rank 0 did not start on " + kA), std::string::npos) << r.err;
  // A program that ran and exited 127 is an ordinary failure.
  const RunResult ran = run({"-H", kA, "--launch-template", kEnvTemplate}, {"exit:127"});
  EXPECT_EQ(ran.exit_code, 1) << ran.err;
}

TEST_F(MultiHostTest, LaunchesThatCannotWorkAreRefusedBeforeAnythingStarts) {
  // Exit 2 like every usage error, the flag named, and no rank started.
  const std::string far = "10.255.0.2:1,10.255.0.3:1";  // other machines, never contacted
  auto refused = [&](std::vector<std::string> flags, const std::string& expected) {
    std::vector<std::string> a{"--env", "HELPER_DIR=" + dir_.path()};
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(), {RANK_HELPER_PATH, "pid"});
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
    const RunResult r = p.wait(30s);
    ASSERT_TRUE(r.finished);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("cohortrun: error: " + expected), std::string::npos) << r.err;
    EXPECT_TRUE(wait_for_pids(dir_.path(), "pid.", 1, 0s).empty()) << "a rank ran";
  };
  refused({"-H", far, "--store-addr", "127.0.0.1"}, "--store-addr 127.0.0.1 is a loopback address");
  refused({"-H", far, "--store-addr", "10.255.0.1", "--backend", "shm"}, "--backend shm cannot join ranks on 2 hosts");
  refused({"-H", far, "--store-addr", "10.255.0.1", "--network-interface", "lo"},
          "--network-interface lo is a loopback interface");
  // -H a:2 b:2: the typo no longer swallows the flags after it (--dry-run
  // would otherwise have started the job).
  refused({"-H", kA + ":1", kB + ":1", "--store-addr", "127.0.0.1", "--dry-run"},
          "the program '" + kB + ":1' looks like a host:slots");
}

TEST_F(MultiHostTest, VerboseSaysTheRemoteProgramsPidAndTheThreadsRanksGet) {
  auto env = clean_environment();
  env["OMP_NUM_THREADS"] = "13";  // exported: what the ranks get, whatever the cores
  const RunResult r = run({"-v", "-H", "localhost:1," + kB + ":1", "--launch-template", kEnvTemplate}, {"pid"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto pids = wait_for_pids(dir_.path(), "pid.", 2, 0s);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_NE(r.err.find("13 thread(s) per rank here"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cohortrun: rank 0: pid " + std::to_string(pids[0]) + "\n"), std::string::npos) << r.err;
  // The program's pid on its host, not its launch command's.
  EXPECT_NE(r.err.find("cohortrun: rank 1 on " + kB + ": pid " + std::to_string(pids[1]) + "\n"), std::string::npos)
      << r.err;
  const RunResult dry =
      run({"--dry-run", "-H", "localhost:1," + kB + ":1", "--launch-template", kEnvTemplate}, {"pid"}, env);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find(" OMP_NUM_THREADS=13"), std::string::npos) << dry.out;
}

TEST_F(MultiHostTest, AMissingLaunchCommandIsReportedBeforeAnythingStarts) {
  const RunResult r = run({"-H", kA, "--launch-template", "no-such-agent-xyz {host}"}, {"pid"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute 'no-such-agent-xyz'"), std::string::npos) << r.err;
}

TEST_F(MultiHostTest, UnresolvableHostsNeedAStoreAddress) {
  std::vector<std::string> a{"-H", "no-such-host.invalid:2", RANK_HELPER_PATH, "pid"};
  CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
  const RunResult r = p.wait(30s);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'no-such-host.invalid' does not resolve"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --store-addr"), std::string::npos) << r.err;
}

TEST_F(MultiHostTest, DryRunPrintsWhatWouldRunWhereAndStartsNothing) {
  const std::string hostfile = dir_.path() + "/hosts";
  std::ofstream(hostfile) << "# two hosts\nnode1 slots=2\nnode2 slots=1\nlocalhost slots=1\n";
  std::vector<std::string> a{"--hostfile", hostfile, "--launch-template", "ip netns exec {host}", "--store-addr",
                             "10.9.8.1", "--dry-run", "--job-id", "dry1", "--env", "FOO=a b",
                             RANK_HELPER_PATH, "pid", "out:x y"};
  CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
  const RunResult r = p.wait(30s);
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& o = r.out;
  EXPECT_NE(o.find("cohortrun: dry run, nothing is started\n"), std::string::npos) << o;
  EXPECT_NE(o.find("job dry1: 4 rank(s) on 3 host(s) of node1:2,node2:1,localhost:1\n"), std::string::npos) << o;
  EXPECT_NE(o.find(std::string("program: ") + RANK_HELPER_PATH + " pid 'out:x y'\n"), std::string::npos) << o;
  EXPECT_NE(o.find("store: 10.9.8.1:<free port> (--store-addr), bound to 10.9.8.1\n"), std::string::npos) << o;
  const std::regex remote(R"(rank 1 on node1, local rank 1 of 2: ip netns exec node1 /\S*cohortrun --remote-rank 1 )");
  EXPECT_TRUE(std::regex_search(o, remote)) << o;
  EXPECT_NE(o.find("rank 2 on node2, local rank 0 of 1: ip netns exec node2 "), std::string::npos) << o;
  EXPECT_NE(o.find(std::string("rank 3 on localhost (this machine), local rank 0 of 1: ") + RANK_HELPER_PATH +
                   " pid 'out:x y'\n"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find(" COHORT_HOST=node1 COHORT_LOCAL_RANK=1 COHORT_LOCAL_SIZE=2 COHORT_RANK=1"), std::string::npos)
      << o;
  EXPECT_NE(o.find("COHORT_SECRET=<generated at start>"), std::string::npos) << o;
  EXPECT_NE(o.find("FOO='a b'"), std::string::npos) << o;
  EXPECT_NE(o.find("COHORT_STORE_ADDR=10.9.8.1:<free port>"), std::string::npos) << o;
  EXPECT_TRUE(wait_for_pids(dir_.path(), "pid.", 1, 0s).empty()) << "a rank ran";
}

TEST_F(MultiHostTest, DryRunReportsProblemsTheRealRunWouldHit) {
  const RunResult r = run({"-H", kA, "--launch-template", "no-such-agent-xyz {host}", "--dry-run"}, {"pid"});
  EXPECT_EQ(r.exit_code, 127) << r.out;
}

}  // namespace
}  // namespace cohort::launcher::testing
