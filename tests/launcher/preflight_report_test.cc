// The judgement of `cohortrun --check` (preflight_report.h) on gathered
// results made by hand: each finding is a problem naming its host and a fix,
// a clean run is a "would work" verdict, and the go decision of the
// collectives follows the same facts. The emulated-cluster version, with
// real probes and injected faults, is tests/cluster/check_test.cc.
#include "cohort/launcher/preflight_report.h"

#include <gtest/gtest.h>

namespace cohort::launcher::preflight_report_test {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string facts(int rank, int local_rank, const std::string& host, const std::string& address,
                  const std::string& build = "00112233aabbccdd", double shm_free = 1e9, long long nofile = 65536) {
  return R"({"rank": )" + std::to_string(rank) + R"(, "local_rank": )" + std::to_string(local_rank) +
         R"(, "local_size": 2, "host": ")" + host + R"(", "hostname": ")" + host +
         R"(", "boot_id": "b", "build_id": ")" + build +
         R"(", "build": "commit x", "libtorch": "none", "backends": ["shm", "gloo", "hierarchical"],
           "interfaces": [{"name": "lo", "address": "127.0.0.1"}, {"name": "eth0", "address": ")" +
         address +
         R"("}], "launch_iface": "eth0", "launch_iface_why": "the route to the store", "listen_port": 40000, "shm_total": 2e9, "shm_free": )" +
         std::to_string(shm_free) + R"(, "shm_need": 2200000, "nofile": )" + std::to_string(nofile) +
         R"(, "memlock": 8388608, "address_space": -1, "port_range": [32768, 60999], "cores": 2, "clock_s": 1})";
}

std::string links(int rank, const std::string& to, const std::string& address, bool ok, double offset = 1e-4) {
  return R"({"rank": )" + std::to_string(rank) + R"(, "to": [{"rank": 0, "host": ")" + to +
         R"(", "addresses": [{"iface": "eth0", "address": ")" + address + R"(", "ok": )" + (ok ? "true" : "false") +
         R"(, "error": ")" + (ok ? "" : "no answer within 1.0 s") + R"("}])" +
         (ok ? R"(, "measured_iface": "eth0", "latency_s": 1e-4, "bytes_per_s": 1.2e8, "offset_s": )" +
                   std::to_string(offset)
             : std::string()) +
         R"(}], "loopback": {"latency_s": 1e-5, "bytes_per_s": 2e9, "offset_s": 0}})";
}

// Two hosts of two ranks, everything fine unless a test changes it.
CheckRun healthy() {
  CheckRun run;
  run.num_ranks = 4;
  run.hosts = {"a", "b"};
  run.store_host = "launcher";
  run.store_address = "10.0.0.1";
  run.store_port = 29500;
  run.build_id = "00112233aabbccdd";
  run.build_description = "commit x";
  run.libtorch = "none";
  run.launch_template = "ssh {host}";
  run.probe_path = "/opt/cohort/bin/cohort-probe";
  const char* host[] = {"a", "a", "b", "b"};
  const char* address[] = {"10.0.0.2", "10.0.0.2", "10.0.0.3", "10.0.0.3"};
  for (int r = 0; r < 4; ++r) {
    ProbeRank p{.rank = r, .host = host[r]};
    p.facts = json::parse(facts(r, r % 2, host[r], address[r]));
    p.done = "";
    p.exited = true;
    run.ranks.push_back(p);
  }
  run.ranks[0].links = json::parse(links(0, "b", "10.0.0.3", true));
  run.ranks[2].links = json::parse(links(2, "a", "10.0.0.2", true));
  run.go = collectives_go(run);
  return run;
}

TEST(PreflightReport, AHealthyRunWouldWork) {
  CheckRun run = healthy();
  EXPECT_EQ(run.go, "1");
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 0) << v.text;
  EXPECT_TRUE(contains(v.text, "cohortrun: check: a launch of 4 ranks on 2 hosts would work\n")) << v.text;
  EXPECT_TRUE(contains(v.text, "a: eth0 chosen (the route to the store; reaches every host); rejected: lo (loopback)"))
      << v.text;
  EXPECT_TRUE(contains(v.text, "0.100 ms")) << v.text;    // the pair's latency
  EXPECT_TRUE(contains(v.text, "120.0 MB/s")) << v.text;  // and bandwidth
}

TEST(PreflightReport, AnotherBuildIsAProblemOfItsHost) {
  CheckRun run = healthy();
  run.ranks[3].facts = json::parse(facts(3, 1, "b", "10.0.0.3", "ffffffffffffffff"));
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 1) << v.text;
  EXPECT_TRUE(contains(v.text, "1. b: runs cohort build ffffffffffffffff")) << v.text;
  EXPECT_TRUE(contains(v.text, "fix: install the same cohort build on every host")) << v.text;
  EXPECT_TRUE(contains(v.text, "would fail: 1 problem\n")) << v.text;
}

TEST(PreflightReport, BlockedIncomingPortsNameTheRangeAndStopTheCollectives) {
  CheckRun run = healthy();
  run.ranks[0].links = json::parse(links(0, "b", "10.0.0.3", false));
  run.go = collectives_go(run);
  EXPECT_EQ(run.go, "a cannot reach b on eth0");
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 1) << v.text;
  EXPECT_TRUE(contains(v.text, "b: its data-plane ports are blocked")) << v.text;
  EXPECT_TRUE(contains(v.text, "`iptables -I INPUT -p tcp --dport 32768:60999 -j ACCEPT`")) << v.text;
  EXPECT_TRUE(contains(v.text, "nft insert rule inet filter input tcp dport 32768-60999 accept")) << v.text;
  EXPECT_TRUE(contains(v.text, "skipped: a cannot reach b on eth0")) << v.text;
}

TEST(PreflightReport, SmallDevShmAndFewDescriptorsAreProblemsWithFixes) {
  CheckRun run = healthy();
  run.ranks[2].facts = json::parse(facts(2, 0, "b", "10.0.0.3", "00112233aabbccdd", 1 << 20, 64));
  run.go = collectives_go(run);
  EXPECT_EQ(run.go, "/dev/shm is too small on b");
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 2) << v.text;
  EXPECT_TRUE(contains(v.text, "b: /dev/shm has 1.0M free, the shm segment of its 2 ranks needs 2.1M")) << v.text;
  EXPECT_TRUE(contains(v.text, "b: ulimit -n is 64, a rank of 4 opens up to 272 descriptors")) << v.text;
  // gloo alone needs no /dev/shm.
  run.backend = "gloo";
  EXPECT_EQ(collectives_go(run), "1");
  EXPECT_EQ(judge(run).problems, 1);
}

TEST(PreflightReport, ALaunchThatFailedOrCouldNotReachTheStoreIsNamed) {
  CheckRun run = healthy();
  run.ranks[1].facts.reset();
  run.ranks[1].exit_code = 255;
  run.ranks[1].output = {"ssh: connect to host a port 22: Connection refused"};
  run.ranks[3].facts.reset();
  run.ranks[3].exit_code = 1;
  run.ranks[3].output = {"cohortrun: rank 3 on b: cannot reach the job's store at 10.0.0.1:29500 from b: timed out"};
  run.go = collectives_go(run);
  EXPECT_EQ(run.go, "not every host's probe answered");
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 2) << v.text;
  EXPECT_TRUE(contains(v.text, "a: the launch of rank 1 failed (exit 255): ssh: connect to host a port 22")) << v.text;
  EXPECT_TRUE(contains(v.text, "fix: run the launch by hand: `ssh a true`")) << v.text;
  EXPECT_TRUE(contains(v.text, "b: cannot reach the store at 10.0.0.1:29500")) << v.text;
  EXPECT_TRUE(contains(v.text, "`iptables -I INPUT -p tcp --dport 29500 -j ACCEPT`")) << v.text;
}

TEST(PreflightReport, ClockSkewIsAWarningNotAProblem) {
  CheckRun run = healthy();
  run.ranks[0].links = json::parse(links(0, "b", "10.0.0.3", true, 2.5));
  const CheckVerdict v = judge(run);
  EXPECT_EQ(v.problems, 0) << v.text;
  EXPECT_TRUE(contains(v.text, "the clocks of a and b differ by 2500.000 ms")) << v.text;
}

TEST(PreflightReport, ContainerInterfacesAreExcluded) {
  std::string why;
  EXPECT_TRUE(excluded_interface("docker0", &why));
  EXPECT_EQ(why, "a container bridge (docker)");
  EXPECT_TRUE(excluded_interface("veth12ab"));
  EXPECT_TRUE(excluded_interface("br-0f3a"));
  EXPECT_TRUE(excluded_interface("lo"));
  EXPECT_FALSE(excluded_interface("eth0"));
  EXPECT_FALSE(excluded_interface("bridge0"));
}

}  // namespace
}  // namespace cohort::launcher::preflight_report_test
