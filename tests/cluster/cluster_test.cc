// Multi-host jobs in an emulated cluster: network namespaces joined by a
// bridge with shaped links (scripts/cluster.sh), ranks started by the real
// `cohortrun -H ... --launch-template 'ip netns exec {host}'`. Skipped, with
// the reason, when the process may not create namespaces.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "tests/cluster/emulated_cluster.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::testing::cluster_test {
namespace {

using namespace std::chrono_literals;
using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

// Lines of `out` printed by rank r ("[r] text" -> "text").
std::vector<std::string> lines_of(const std::string& out, int r) {
  std::vector<std::string> lines;
  const std::string prefix = "[" + std::to_string(r) + "] ";
  for (const std::string& l : launcher::testing::split_lines(out))
    if (l.starts_with(prefix)) lines.push_back(l.substr(prefix.size()));
  return lines;
}

bool has_line(const std::string& out, int r, const std::string& line) {
  for (const std::string& l : lines_of(out, r))
    if (l == line) return true;
  return false;
}

// One 3-host cluster for the suite (0.3 s to create, removed at the end).
class ClusterTest : public SharedClusterTest<3> {
 protected:
  // cohortrun -H <hosts> --launch-template 'ip netns exec {host}' --store-addr <bridge> <flags> <program...>
  RunResult cohortrun(const std::string& hosts, std::vector<std::string> flags, std::vector<std::string> program,
                      std::chrono::seconds timeout = 90s, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> a = cluster_->launch_flags(hosts);
    a.insert(a.end(), {"--env", "HELPER_DIR=" + dir_.path()});
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(), program.begin(), program.end());
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path(), env);
    return p.wait(timeout);
  }

  TempDir dir_;
};

TEST_F(ClusterTest, ScriptMadeHostsWithAddressesAndShapedLinks) {
  ASSERT_EQ(cluster_->hosts().size(), 3u);
  const std::regex address(R"(10\.\d+\.\d+\.\d+)");
  EXPECT_TRUE(std::regex_match(cluster_->bridge_address(), address)) << cluster_->output();
  std::set<std::string> distinct(cluster_->addresses().begin(), cluster_->addresses().end());
  EXPECT_EQ(distinct.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto addr = run_command("ip -n " + host(i) + " -4 -o addr show dev eth0");
    EXPECT_NE(addr.output.find(cluster_->addresses()[i] + "/24"), std::string::npos) << addr.output;
    const auto qdisc = run_command("tc -n " + host(i) + " qdisc show dev eth0");
    EXPECT_NE(qdisc.output.find("tbf"), std::string::npos) << qdisc.output;
    EXPECT_NE(qdisc.output.find("rate 1Gbit"), std::string::npos) << qdisc.output;
    const auto port = run_command("tc qdisc show dev " + cluster_->prefix() + "-v" + std::to_string(i));
    EXPECT_NE(port.output.find("rate 1Gbit"), std::string::npos) << port.output;
  }
  // exec runs in the host: its only address there is the host's.
  const auto in_host = run_command(std::string(CLUSTER_SCRIPT) + " exec " + host(1) + " ip -4 -o addr show");
  EXPECT_NE(in_host.output.find(cluster_->addresses()[1]), std::string::npos) << in_host.output;
  EXPECT_EQ(in_host.output.find(cluster_->addresses()[0]), std::string::npos) << in_host.output;
}

TEST_F(ClusterTest, RanksRunInTheirHostsAndReachTheStore) {
  const RunResult r = cohortrun(host(0) + ":2," + host(1) + ":1," + host(2) + ":2", {},
                                {RANK_HELPER_PATH, "env", "netns", "store"});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const int host_of[] = {0, 0, 1, 2, 2};
  const int local_rank[] = {0, 1, 0, 0, 1};
  const int local_size[] = {2, 2, 1, 2, 2};
  // Rank 0's value of a variable, which every rank must share.
  const auto rank0 = [&](const std::string& name) {
    for (const auto& l : lines_of(r.out, 0))
      if (l.starts_with(name + "=")) return l.substr(name.size() + 1);
    return std::string("?");
  };
  const std::string store = rank0("COHORT_STORE_ADDR");
  EXPECT_TRUE(store.starts_with(cluster_->bridge_address() + ":")) << store;
  // torch.distributed's master: chosen in rank 0's host (its address there)
  // and published to the others; a port other than the store's.
  EXPECT_EQ(rank0("MASTER_ADDR"), cluster_->addresses()[0]);
  EXPECT_NE(store.substr(store.rfind(':') + 1), rank0("MASTER_PORT"));
  std::map<int, std::string> netns;
  for (int rank = 0; rank < 5; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_TRUE(has_line(r.out, rank, "COHORT_HOST=" + host(host_of[rank]))) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "COHORT_LOCAL_RANK=" + std::to_string(local_rank[rank]))) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "COHORT_LOCAL_SIZE=" + std::to_string(local_size[rank]))) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "COHORT_STORE_ADDR=" + store)) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "MASTER_ADDR=" + rank0("MASTER_ADDR"))) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "MASTER_PORT=" + rank0("MASTER_PORT"))) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "store ok " + std::to_string(rank) + " of 5")) << r.out;
    for (const auto& l : lines_of(r.out, rank))
      if (l.starts_with("netns ")) netns[rank] = l;
  }
  // Ranks of one host share its namespace; hosts differ from each other and
  // from the launcher's.
  EXPECT_EQ(netns[0], netns[1]);
  EXPECT_EQ(netns[3], netns[4]);
  EXPECT_NE(netns[0], netns[2]);
  EXPECT_NE(netns[2], netns[3]);
  char own[256] = {};
  ASSERT_GT(readlink("/proc/self/ns/net", own, sizeof own - 1), 0);
  EXPECT_NE(netns[0], std::string("netns ") + own);
}

TEST_F(ClusterTest, AFailureOnOneHostStopsTheOthers) {
  const RunResult r = cohortrun(host(0) + ":2," + host(1) + ":2", {"--grace-s", "1"},
                                {RANK_HELPER_PATH, "pid", "barrier", "@2:err:host one gives up", "@2:exit:3",
                                 "sleep:60"},
                                60s);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.seconds, 15);
  EXPECT_NE(r.err.find("rank 2 on " + host(1) + " exited with code 3; stopped the other 3 rank(s)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[2] host one gives up"), std::string::npos) << r.err;
  const auto pids = launcher::testing::wait_for_pids(dir_.path(), "pid.", 4, 1s);
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_FALSE(launcher::testing::process_alive(pid)) << pid;
}

TEST_F(ClusterTest, AnUnroutableStoreAddressFailsAtOnceBeforeAnyProgramStarts) {
  // An address of the launcher's machine that the hosts have no route to
  // (they route their subnet only): connect() says ENETUNREACH, which no
  // retry fixes, so the remote ends give up at once instead of after the
  // 60 s start timeout.
  const std::string unroutable = "198.18." + std::to_string(::getpid() % 250) + ".1";
  const std::string bridge = cluster_->prefix() + "-br";
  ASSERT_EQ(run_command("ip addr add " + unroutable + "/32 dev " + bridge).exit_code, 0);
  const RunResult r =
      cohortrun(host(0) + ":1," + host(1) + ":1", {"--store-addr", unroutable}, {RANK_HELPER_PATH, "pid"}, 60s);
  run_command("ip addr del " + unroutable + "/32 dev " + bridge);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot reach the job's store at " + unroutable), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Network is unreachable: this host has no route to " + unroutable + " (retrying cannot help"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("within 60000 ms"), std::string::npos) << "it waited out the connect timeout:\n" << r.err;
  EXPECT_TRUE(launcher::testing::wait_for_pids(dir_.path(), "pid.", 1, 0s).empty()) << "a rank's program ran";
  std::printf("[ measured ] an unroutable store address failed the job in %.2f s\n", r.seconds);
}

TEST_F(ClusterTest, LaunchesThatCannotWorkAreRefusedBeforeAnyRankStarts) {
  const std::string hosts = host(0) + ":2," + host(1) + ":2";
  auto refused = [&](std::vector<std::string> flags, std::vector<std::string> program, const std::string& expected) {
    const RunResult r = cohortrun(hosts, std::move(flags), std::move(program), 60s);
    ASSERT_TRUE(r.finished);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("cohortrun: error: " + expected), std::string::npos) << r.err;
    EXPECT_TRUE(launcher::testing::wait_for_pids(dir_.path(), "pid.", 1, 0s).empty()) << "a rank ran";
    std::printf("[ measured ] refused in %.2f s: %s\n", r.seconds, expected.c_str());
  };
  refused({"--store-addr", "127.0.0.1"}, {RANK_HELPER_PATH, "pid"},
          "--store-addr 127.0.0.1 is a loopback address, which reaches only this machine: the ranks on " + host(0) +
              " could never reach the store there");
  refused({"--backend", "shm"}, {RANK_HELPER_PATH, "pid"}, "--backend shm cannot join ranks on 2 hosts");
  refused({"--network-interface", "lo"}, {RANK_HELPER_PATH, "pid"},
          "--network-interface lo is a loopback interface, which reaches no other host");
  // -H h0:2 h1:2 (a space for the comma): h1:2 became the program.
  refused({}, {host(2) + ":1", "--dry-run", RANK_HELPER_PATH, "pid"},
          "the program '" + host(2) +
              ":1' looks like a host:slots, and every word after it (flags such as "
              "--store-addr or --dry-run included) would be its arguments; separate the hosts with commas, without "
              "spaces: -H " +
              hosts + "," + host(2) + ":1");
}

TEST_F(ClusterTest, AProgramMissingOnAHostExits127) {
  const RunResult r = cohortrun(host(0) + ":1," + host(1) + ":1", {}, {dir_.path() + "/no-such-program"}, 60s);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 127) << r.err;
  // Whichever rank's end came first is the one reported.
  const std::regex said("cohortrun: error: rank [01] did not start on (" + host(0) + "|" + host(1) +
                        "): its program or cohortrun was not found there");
  EXPECT_TRUE(std::regex_search(r.err, said)) << r.err;
}

#ifdef COHORT_TEST_HIERARCHICAL
#define SKIP_WITHOUT_HIERARCHICAL() (void)0
#else
#define SKIP_WITHOUT_HIERARCHICAL() GTEST_SKIP() << "skipped: this build has no gloo, so no hierarchical backend"
#endif

TEST_F(ClusterTest, HierarchicalEveryCollectiveOnTwoHostsOfTwo) {
  SKIP_WITHOUT_HIERARCHICAL();
  const RunResult r =
      cohortrun(host(0) + ":2," + host(1) + ":2", {"--backend", "hierarchical"}, {CLUSTER_RANK_PROGRAM, "collectives"});
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(has_line(r.out, rank, "backend hierarchical")) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "hosts 2 slices 2 cross gloo")) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "ok")) << r.out;
  }
  // The start line counts the -H hosts, as the backend does: the emulated
  // hosts share one machine name.
  EXPECT_NE(r.err.find("[0] cohort: backend hierarchical, 4 ranks on 2 hosts"), std::string::npos) << r.err;
}

TEST_F(ClusterTest, HierarchicalEveryCollectiveOnUnevenHosts) {
  SKIP_WITHOUT_HIERARCHICAL();
  // auto picks hierarchical by itself when ranks span hosts.
  const RunResult r = cohortrun(host(0) + ":1," + host(1) + ":2," + host(2) + ":2", {},
                                {CLUSTER_RANK_PROGRAM, "collectives"});
  ASSERT_TRUE(r.finished) << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_TRUE(has_line(r.out, rank, "backend hierarchical")) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "hosts 3 slices 1 cross gloo")) << r.out;
    EXPECT_TRUE(has_line(r.out, rank, "ok")) << r.out;
  }
}

TEST_F(ClusterTest, MpirunRunsAJobAcrossHosts) {
#ifndef COHORT_TEST_MPI
  GTEST_SKIP() << "skipped: this build has no mpi backend";
#endif
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "skipped: mpirun is not installed";
  // OpenMPI starts its daemons through an rsh agent; this one enters the
  // host's namespace instead of logging in. Each host gets a TMPDIR of its
  // own, as real hosts have: the emulated ones share /tmp and one host
  // name, so their daemons would create the same session directory
  // (/tmp/ompi.<host name>.<uid>/jf.<job family>/0) at the same moment, and
  // the loser of that race fails with "File exists".
  const std::string agent = dir_.path() + "/netns_agent.sh";
  std::ofstream(agent) << "#!/bin/sh\nhost=$1\nshift\nmkdir -p " << dir_.path() << "/tmp-$host\n"
                       << "exec ip netns exec \"$host\" env TMPDIR=" << dir_.path() << "/tmp-$host /bin/sh -c \"$*\"\n";
  ::chmod(agent.c_str(), 0755);
  const std::string hostfile = dir_.path() + "/hosts";
  std::ofstream(hostfile) << host(0) << " slots=2\n" << host(1) << " slots=2\n";
  const std::string subnet = cluster_->bridge_address().substr(0, cluster_->bridge_address().rfind('.')) + ".0/24";
  // Not the vader (shared memory) BTL: the emulated hosts share /dev/shm and
  // one host name, which OpenMPI's shared-memory segments are keyed by.
  // rtc_hwloc_vmhole none: OpenMPI 4.1's daemon (orted) otherwise writes
  // its hwloc topology into a segment it maps at a fixed address in the
  // biggest hole of its address space, and at random it picks one its own
  // stack grows into: orted dies of SIGSEGV in hwloc_shmem_topology_write
  // (seen in this test, about one run in tens). Without the shared
  // topology each process reads its own; nothing here binds.
  const auto r = run_command("timeout 120 mpirun --allow-run-as-root --hostfile " + hostfile +
                             " -np 4 --mca plm_rsh_agent " + agent + " --mca rtc_hwloc_vmhole none" +
                             " --mca oob_tcp_if_include " + subnet +
                             " --mca btl tcp,self --mca btl_tcp_if_include " + subnet + " --bind-to none " +
                             CLUSTER_RANK_PROGRAM + " collectives");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  size_t ok = 0, mpi = 0;
  for (const std::string& l : launcher::testing::split_lines(r.output)) {
    ok += l == "ok";
    mpi += l == "backend mpi";
  }
  EXPECT_EQ(ok, 4u) << r.output;
  EXPECT_EQ(mpi, 4u) << r.output;
}

// A job of `cut` ranks, two on each of `cluster`'s first two hosts, whose
// second host's link is cut once every rank loops; the job's end and the
// seconds from the cut to it.
struct CutJob {
  RunResult result;
  double cut_to_end_s = 0;
};

CutJob run_and_cut(EmulatedCluster& cluster, std::map<std::string, std::string> env, std::vector<std::string> flags,
                   const std::string& bound_s) {
  TempDir dir;
  std::vector<std::string> a = cluster.launch_flags(cluster.hosts()[0] + ":2," + cluster.hosts()[1] + ":2");
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), {CLUSTER_RANK_PROGRAM, "cut", bound_s, cluster.hosts()[1]});
  CohortrunProcess p(COHORTRUN_PATH, a, dir.path(), env);
  const auto deadline = launcher::testing::Clock::now() + 60s;
  for (;;) {
    const std::string out = launcher::testing::read_text(dir.path() + "/cohortrun.out");
    int looping = 0;
    for (int rank = 0; rank < 4; ++rank) looping += has_line(out, rank, "looping") ? 1 : 0;
    if (looping == 4) break;
    if (!p.running() || launcher::testing::Clock::now() >= deadline) {
      ADD_FAILURE() << "ranks did not start looping:\n"
                    << out << launcher::testing::read_text(dir.path() + "/cohortrun.err");
      return {p.wait(10s), 0};
    }
    std::this_thread::sleep_for(20ms);
  }
  const auto cut = run_command("ip -n " + cluster.hosts()[1] + " link set eth0 down");
  EXPECT_EQ(cut.exit_code, 0) << cut.output;
  const auto cut_at = launcher::testing::Clock::now();
  CutJob job{p.wait(120s)};
  job.cut_to_end_s = std::chrono::duration<double>(launcher::testing::Clock::now() - cut_at).count();
  return job;
}

TEST(ClusterLinkCut, TheOtherHostRaisesWithinTheTimeout) {
  SKIP_WITHOUT_CLUSTER();
  SKIP_WITHOUT_HIERARCHICAL();
  // A cluster of its own: its link does not come back.
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.output();
  constexpr double kTimeout = 4;
  // The collective that fails must end within the timeout, plus slack for a
  // loaded machine (the failure report exchange, scheduling).
  auto env = launcher::testing::clean_environment();
  env["COHORT_TIMEOUT_S"] = std::to_string(kTimeout);
  const RunResult r = run_and_cut(cluster, env, {}, std::to_string(kTimeout + 4)).result;
  ASSERT_TRUE(r.finished);
  // The ranks on the healthy host raised a TimeoutError or PeerLostError
  // that names a peer, within the bound of the collective's start.
  const std::regex clear(R"(raised (TimeoutError|PeerLostError) after ([0-9.]+) s: (.*rank [0-9]+.*))");
  for (int rank = 0; rank < 2; ++rank) {
    std::smatch m;
    bool found = false;
    for (const auto& l : lines_of(r.out, rank))
      if (std::regex_match(l, m, clear)) {
        found = true;
        EXPECT_LE(std::stod(m[2]), kTimeout + 4) << l;
      }
    EXPECT_TRUE(found) << "rank " << rank << " on the healthy host raised no clear error:\n" << r.out << r.err;
  }
  // The cut host's ranks, which cannot reach the store, are ended by
  // cohortrun's host watch, which names their host.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("cohortrun: error: host " + cluster.hosts()[1] + " lost: ranks 2, 3"), std::string::npos)
      << r.out << r.err;
}

// With default settings (COHORT_TIMEOUT_S of 300 s), cohortrun's host watch
// ends the job once the cut host's ranks have sent no heartbeat for
// COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S (10 s), naming that host and its
// ranks, on the gloo and the hierarchical backends.
TEST(ClusterLinkCut, WithDefaultsCohortrunNamesTheLostHostAndItsRanksInSeconds) {
  SKIP_WITHOUT_CLUSTER();
  SKIP_WITHOUT_HIERARCHICAL();
  for (const char* backend : {"gloo", "hierarchical"}) {
    SCOPED_TRACE(backend);
    EmulatedCluster cluster(2);
    ASSERT_TRUE(cluster.ok()) << cluster.output();
    const CutJob job = run_and_cut(cluster, launcher::testing::clean_environment(), {"--backend", backend}, "1000");
    const RunResult& r = job.result;
    ASSERT_TRUE(r.finished) << r.out << r.err;
    std::printf("%s: the job ended %.1f s after the cut\n", backend, job.cut_to_end_s);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    const std::regex verdict("cohortrun: error: host " + cluster.hosts()[1] +
                             " lost: ranks 2, 3 on it have sent no heartbeat since [0-9:]+ UTC "
                             "\\(COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S=10\\).*");
    bool named = false;
    for (const std::string& l : launcher::testing::split_lines(r.err)) {
      named = named || std::regex_match(l, verdict);
      // No healthy host or rank is blamed.
      EXPECT_EQ(l.find(cluster.hosts()[0]), std::string::npos) << l;
    }
    EXPECT_TRUE(named) << r.err;
    // The default COHORT_TIMEOUT_S (300 s) would have ended it much later:
    // this is the watch's doing, within the verdict's silence plus slack
    // for a loaded machine.
    EXPECT_LT(job.cut_to_end_s, 60) << r.err;
  }
}

TEST(ClusterScript, AFailedUpRemovesWhatItCreated) {
  SKIP_WITHOUT_CLUSTER();
  const std::string prefix = "cf" + std::to_string(::getpid() % 100000000);
  // An interface with the name the second host's port would get makes `up`
  // fail half-way.
  ASSERT_EQ(run_command("ip link add " + prefix + "-v1 type veth peer name " + prefix + "-x").exit_code, 0);
  const auto up = run_command(std::string(CLUSTER_SCRIPT) + " up --hosts 3 --prefix " + prefix);
  EXPECT_NE(up.exit_code, 0) << up.output;
  EXPECT_NE(up.output.find("up failed; removing " + prefix), std::string::npos) << up.output;
  const auto left = run_command("ip netns list; ip -o link show");
  EXPECT_EQ(left.output.find(prefix + "-h"), std::string::npos) << left.output;
  EXPECT_EQ(left.output.find(prefix + "-br"), std::string::npos) << left.output;
  run_command("ip link del " + prefix + "-v1");
  EXPECT_EQ(run_command(std::string("test -e /run/cohort-cluster/") + prefix + ".env").exit_code, 1);
}

TEST(ClusterScript, TheWatcherRemovesTheClusterOfAnOwnerThatDied) {
  SKIP_WITHOUT_CLUSTER();
  const pid_t owner = ::fork();
  if (owner == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string prefix = "cw" + std::to_string(::getpid() % 100000000);
  const auto up = run_command(std::string(CLUSTER_SCRIPT) + " up --hosts 2 --prefix " + prefix + " --owner " +
                              std::to_string(owner));
  ASSERT_EQ(up.exit_code, 0) << up.output;
  EXPECT_NE(run_command("ip netns list").output.find(prefix + "-h1"), std::string::npos);
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  const auto deadline = launcher::testing::Clock::now() + 10s;
  while (run_command("ip netns list; ip -o link show").output.find(prefix + "-") != std::string::npos &&
         launcher::testing::Clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  const auto left = run_command("ip netns list; ip -o link show");
  EXPECT_EQ(left.output.find(prefix + "-"), std::string::npos) << left.output;
  run_command(std::string(CLUSTER_SCRIPT) + " down --prefix " + prefix);
}

TEST(ClusterScript, RejectsBadArguments) {
  SKIP_WITHOUT_CLUSTER();
  const std::string script = CLUSTER_SCRIPT;
  EXPECT_NE(run_command(script + " up --hosts 0").output.find("--hosts needs"), std::string::npos);
  EXPECT_NE(run_command(script + " up --hosts 2 --link fast").output.find("--link needs"), std::string::npos);
  EXPECT_NE(run_command(script + " up --hosts 2 --delay soon").output.find("--delay needs"), std::string::npos);
  EXPECT_NE(run_command(script + " up --hosts 2 --prefix Bad-Name").output.find("--prefix must"), std::string::npos);
  EXPECT_NE(run_command(script + " exec no-such-host-xyz true").output.find("no host"), std::string::npos);
  EXPECT_NE(run_command(script + " frobnicate").exit_code, 0);
}

}  // namespace
}  // namespace cohort::testing::cluster_test
