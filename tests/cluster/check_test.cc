// `cohortrun --check` on an emulated cluster (scripts/cluster.sh): a healthy
// cluster passes with exit code 0 and writes a topology the simulator
// loads; each injected fault (a firewalled store port and data port, an
// nftables rule inside one host's namespace; a host running another cohort
// build; a host whose launch fails; an interface that does not route
// between the hosts; a /dev/shm too small; the store port taken) is found,
// named with its host and a fix, and fails the check with exit code 1.
// Skipped, with the reason, without namespaces or nftables.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/cluster/emulated_cluster.h"
#include "tests/launcher/cohortrun_process.h"
#include "tools/sim/topology.h"

namespace cohort::testing::check_test {
namespace {

using namespace std::chrono_literals;
using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One 2-host cluster for the suite; every fault is removed by the test that
// made it.
class CheckTest : public SharedClusterTest<2> {
 protected:
  std::string hosts() const { return host(0) + ":2," + host(1) + ":2"; }

  // cohortrun --check -H <hosts> --launch-template T --store-addr <bridge> <flags>
  RunResult check(std::vector<std::string> flags, const std::string& launch_template = kLaunchTemplate,
                  const std::string& host_list = "") {
    std::vector<std::string> a{"--check"};
    for (std::string& f : cluster_->launch_flags(host_list.empty() ? hosts() : host_list, launch_template))
      a.push_back(std::move(f));
    a.insert(a.end(), flags.begin(), flags.end());
    CohortrunProcess p(COHORTRUN_PATH, a, dir_.path());
    return p.wait(150s);
  }

  TempDir dir_{"check_test"};
};

// A change to one host's namespace: `apply` (a shell command) runs there
// now, `undo` when this is destroyed, whether or not the test got through.
class HostChange {
 public:
  HostChange(const std::string& host, const std::string& apply, const std::string& undo)
      : undo_("ip netns exec " + host + " sh -c '" + undo + "'") {
    const CommandResult r = run_command("ip netns exec " + host + " sh -c '" + apply + "'");
    ok_ = r.exit_code == 0;
    error_ = r.output;
  }
  ~HostChange() { run_command(undo_); }
  HostChange(const HostChange&) = delete;
  HostChange& operator=(const HostChange&) = delete;
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

 private:
  std::string undo_;
  bool ok_ = false;
  std::string error_;
};

// An nftables table in one host's namespace with `rules`.
HostChange add_firewall(const std::string& host, const std::vector<std::string>& rules) {
  std::string script = "add table inet cohort_check_test\n";
  script += "add chain inet cohort_check_test input { type filter hook input priority 0; }\n";
  script += "add chain inet cohort_check_test output { type filter hook output priority 0; }\n";
  for (const std::string& rule : rules) script += "add rule inet cohort_check_test " + rule + "\n";
  TempDir dir("firewall");
  dir.write("rules.nft", script);
  return HostChange(host, "nft -f " + dir / "rules.nft", "nft delete table inet cohort_check_test");
}

// An interface eth1 with `address` in one host's namespace: one end of a
// veth pair that leads nowhere.
HostChange add_dead_end_interface(const std::string& host, const std::string& address) {
  return HostChange(host,
                    "ip link add eth1 type veth peer name eth1peer && ip addr add " + address +
                        " dev eth1 && ip link set eth1peer up && ip link set eth1 up",
                    "ip link del eth1");
}

#define SKIP_WITHOUT_NFT()                                                               \
  do {                                                                                   \
    if (run_command("command -v nft").exit_code != 0)                                    \
      GTEST_SKIP() << "skipped: needs nftables' nft (scripts/bootstrap.sh installs it)"; \
  } while (0)

// A free TCP port on `address` (bound and released).
int free_port(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST_F(CheckTest, AHealthyClusterPassesAndItsTopologyLoads) {
  const std::string topology = dir_ / "topology.json";
  const RunResult r = check({"--check-topology", topology});
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "cohortrun: check: a launch of 4 ranks on 2 hosts would work\n")) << r.out;
  for (int i = 0; i < 2; ++i) {
    // Its row: ranks, launch ok, the build and the interface with its address.
    const std::string row = host(i) + " ";
    EXPECT_TRUE(contains(r.out, row)) << r.out;
    EXPECT_TRUE(contains(r.out, "eth0 " + cluster_->addresses()[i])) << r.out;
    EXPECT_TRUE(contains(
        r.out, host(i) + ": eth0 chosen (the route to the store; reaches every host); rejected: lo (loopback)"))
        << r.out;
  }
  EXPECT_TRUE(contains(r.out, host(0) + ": 2 ranks ok")) << r.out;  // shm inside each host
  EXPECT_TRUE(contains(r.out, host(1) + ": 2 ranks ok")) << r.out;
  EXPECT_TRUE(contains(r.out, "4 ranks ok")) << r.out;  // gloo, hierarchical
  EXPECT_FALSE(contains(r.out, "problems:")) << r.out;
  EXPECT_LT(r.seconds, 30) << r.out;

  // The topology: the simulator reads it, with the cluster's shape.
  const sim::Topology t = sim::read_topology_file(topology);
  EXPECT_EQ(t.hosts, 2);
  EXPECT_EQ(t.ranks_per_host, 2);
  EXPECT_TRUE(t.one_machine);  // namespaces of one machine share its boot id
  EXPECT_TRUE(std::isfinite(t.network.bytes_per_s) && t.network.bytes_per_s > 0);
  EXPECT_TRUE(std::isfinite(t.shm.bytes_per_s) && t.shm.bytes_per_s > 0);
  TempDir work("check_sim");
  work.write("w.json", R"({"name": "one", "update_s": 0, "threads": 1, "ordered": false,
                           "tensors": [{"name": "grad/0.weight", "bytes": 1048576, "ready_s": 0.001}]})");
  const CommandResult predict =
      run_command(std::string(COHORT_SIM_PATH) + " predict --topology " + topology + " --workload " + work / "w.json");
  EXPECT_EQ(predict.exit_code, 0) << predict.output;
}

TEST_F(CheckTest, AFirewalledStorePortIsNamedWithTheRuleToOpen) {
  SKIP_WITHOUT_NFT();
  const int port = free_port(cluster_->bridge_address());
  const HostChange firewall = add_firewall(host(1), {"output tcp dport " + std::to_string(port) + " drop"});
  ASSERT_TRUE(firewall.ok()) << firewall.error();
  const RunResult r = check({"--port", std::to_string(port), "--start-timeout", "3"});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string where =
      host(1) + ": cannot reach the store at " + cluster_->bridge_address() + ":" + std::to_string(port);
  EXPECT_TRUE(contains(r.out, where)) << r.out;
  EXPECT_TRUE(contains(r.out, "iptables -I INPUT -p tcp --dport " + std::to_string(port) + " -j ACCEPT")) << r.out;
  EXPECT_FALSE(contains(r.out, host(0) + ": cannot reach the store")) << r.out;
  EXPECT_TRUE(contains(r.out, "would fail: ")) << r.out;
}

TEST_F(CheckTest, AFirewalledDataPortIsNamedWithTheRangeToOpen) {
  SKIP_WITHOUT_NFT();
  // New connections to the ephemeral ports (where gloo and the probe
  // listen) are dropped; the store's port (below the range) and the
  // replies of h1's own connections pass.
  const HostChange firewall = add_firewall(host(1), {"input ct state new tcp dport 32768-60999 drop"});
  ASSERT_TRUE(firewall.ok()) << firewall.error();
  const RunResult r = check({"--port", std::to_string(20000 + ::getpid() % 5000)});
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, host(1) + ": its data-plane ports are blocked")) << r.out;
  EXPECT_TRUE(contains(r.out, "iptables -I INPUT -p tcp --dport 32768:60999 -j ACCEPT")) << r.out;
  EXPECT_FALSE(contains(r.out, host(0) + ": its data-plane ports are blocked")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped: " + host(0) + " cannot reach " + host(1))) << r.out;
}

TEST_F(CheckTest, AHostWithAnotherBuildIsNamed) {
  // Another build on h1 only: this build's file that holds the id (the
  // probe, or cohort/common's library when shared) with its id changed,
  // bind-mounted over the file in a mount namespace of h1's launch.
  const std::string id = [] {
    std::string out = run_command(std::string(PROBE_PATH) + " --build-id").output;
    return out.substr(0, out.find('\n'));
  }();
  ASSERT_EQ(id.size(), 16u) << id;
  std::string other = id;
  std::reverse(other.begin(), other.end());
  if (other == id) other[0] = other[0] == 'a' ? 'b' : 'a';
  std::string holder, binary;
  for (const std::string& path : {std::string(PROBE_PATH), std::string(COMMON_LIBRARY_PATH)}) {
    std::ifstream in(path, std::ios::binary);
    binary.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (binary.find(id) != std::string::npos) {
      holder = path;
      break;
    }
  }
  ASSERT_FALSE(holder.empty()) << "the build id " << id << " is in neither " << PROBE_PATH << " nor "
                               << COMMON_LIBRARY_PATH;
  for (size_t at; (at = binary.find(id)) != std::string::npos;) binary.replace(at, id.size(), other);
  dir_.write("other-build", binary);
  ::chmod((dir_ / "other-build").c_str(), 0755);
  const std::string launch = "ip netns exec {host} unshare -m sh -c 'test {host} != " + host(1) + " || mount --bind " +
                             dir_ / "other-build" + " " + holder + "; exec \"$0\" \"$@\"'";
  const RunResult r = check({}, launch);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, host(1) + ": runs cohort build " + other + " ")) << r.out;
  EXPECT_TRUE(contains(r.out, "where cohortrun is build " + id)) << r.out;
  EXPECT_FALSE(contains(r.out, host(0) + ": runs cohort build")) << r.out;
  EXPECT_TRUE(contains(r.out, "would fail: 1 problem\n")) << r.out;
}

TEST_F(CheckTest, AHostWhoseLaunchFailsIsNamed) {
  const RunResult r = check({}, kLaunchTemplate, host(0) + ":1,nosuchhost" + std::to_string(::getpid()) + ":1");
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string bad = "nosuchhost" + std::to_string(::getpid());
  EXPECT_TRUE(contains(r.out, bad + ": the launch of rank 1 failed")) << r.out;
  EXPECT_TRUE(contains(r.out, "fix: run the launch by hand: `ip netns exec " + bad + " true`")) << r.out;
  EXPECT_TRUE(contains(r.out, "would fail: 1 problem\n")) << r.out;
}

TEST_F(CheckTest, AnInterfaceThatDoesNotRouteIsRejectedAndRefusedWhenForced) {
  // eth1 on both hosts (one end of a veth pair that leads nowhere), in
  // subnets that no route joins.
  const HostChange eth1[] = {add_dead_end_interface(host(0), "192.0.2.10/24"),
                             add_dead_end_interface(host(1), "198.51.100.11/24")};
  for (const HostChange& e : eth1) ASSERT_TRUE(e.ok()) << e.error();
  const RunResult chosen = check({});
  const RunResult forced = check({"--network-interface", "eth1"});
  ASSERT_TRUE(chosen.finished && forced.finished);
  // Left to itself, the launch uses eth0 and the check says why not eth1.
  EXPECT_EQ(chosen.exit_code, 0) << chosen.out << chosen.err;
  EXPECT_TRUE(contains(chosen.out, host(0) + ": eth0 chosen")) << chosen.out;
  EXPECT_TRUE(contains(chosen.out, "eth1 (not reached from " + host(1) + ": Network is unreachable)")) << chosen.out;
  // Forced onto eth1 it would fail, and the fix names eth0.
  EXPECT_EQ(forced.exit_code, 1) << forced.out;
  EXPECT_TRUE(contains(forced.out, host(0) + ": the launch would use eth1 (--network-interface), which does not route"))
      << forced.out;
  EXPECT_TRUE(contains(forced.out, "fix: pass --network-interface eth0")) << forced.out;
}

TEST_F(CheckTest, ADevShmTooSmallIsNamed) {
  const std::string launch = std::string(kLaunchTemplate) + " unshare -m sh -c 'test {host} != " + host(1) +
                             " || mount -t tmpfs -o size=1M tmpfs /dev/shm; exec \"$0\" \"$@\"'";
  const RunResult r = check({}, launch);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, host(1) + ": /dev/shm has 1.0M free, the shm segment of its 2 ranks needs ")) << r.out;
  EXPECT_TRUE(contains(r.out, "mount -o remount,size=")) << r.out;
  EXPECT_FALSE(contains(r.out, host(0) + ": /dev/shm")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped: /dev/shm is too small on " + host(1))) << r.out;

  // gloo alone needs no /dev/shm: the launch would work, and the backends
  // that need it are skipped on that host rather than dying of SIGBUS.
  const RunResult gloo = check({"--backend", "gloo"}, launch);
  ASSERT_TRUE(gloo.finished);
  EXPECT_EQ(gloo.exit_code, 0) << gloo.out << gloo.err;
  EXPECT_TRUE(contains(gloo.out, host(1) + ": skipped (/dev/shm too small on " + host(1) + ")")) << gloo.out;
  EXPECT_TRUE(contains(gloo.out, "hierarchical  skipped (/dev/shm too small on " + host(1) + ")")) << gloo.out;
  EXPECT_TRUE(contains(gloo.out, "gloo          4 ranks ok")) << gloo.out;
}

TEST_F(CheckTest, AStorePortTakenOnTheStoreHostIsNamedAsSuch) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, cluster_->bridge_address().c_str(), &a.sin_addr);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const RunResult r = check({"--port", std::to_string(port)});
  ::close(fd);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "the store port " + std::to_string(port) + " is taken on the store host")) << r.out;
  EXPECT_TRUE(contains(r.out, "would fail: 1 problem\n")) << r.out;  // the rest checked on a free port
}

}  // namespace
}  // namespace cohort::testing::check_test
