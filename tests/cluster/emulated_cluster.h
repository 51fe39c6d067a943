// Test support: an emulated cluster (scripts/cluster.sh) for one test or
// suite, removed when destroyed, and by the script's watcher if this process
// dies first. Needs CAP_NET_ADMIN and CAP_SYS_ADMIN; cluster_unavailable()
// says why not, SKIP_WITHOUT_CLUSTER() skips with it, and SharedClusterTest
// is the fixture of a suite that shares one cluster.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cohort::testing {

// How cohortrun starts a rank on an emulated host (its network namespace).
inline constexpr const char* kLaunchTemplate = "ip netns exec {host}";

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through /bin/sh.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Why this process cannot create network namespaces, or nullopt when it can.
inline std::optional<std::string> cluster_unavailable() {
  std::ifstream status("/proc/self/status");
  unsigned long long effective = 0;
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("CapEff:")) effective = std::stoull(line.substr(7), nullptr, 16);
  constexpr int kNetAdmin = 12, kSysAdmin = 21;
  if (!(effective >> kNetAdmin & 1) || !(effective >> kSysAdmin & 1))
    return "needs CAP_NET_ADMIN and CAP_SYS_ADMIN to create network namespaces (run as root, as CI does)";
  if (run_command("command -v ip && command -v tc").exit_code != 0) return "needs iproute2 (ip, tc)";
  return std::nullopt;
}

// Skips the test, saying why, where namespaces cannot be created.
#define SKIP_WITHOUT_CLUSTER()                                                                          \
  do {                                                                                                  \
    if (const auto why = ::cohort::testing::cluster_unavailable()) GTEST_SKIP() << "skipped: " << *why; \
  } while (0)

class EmulatedCluster {
 public:
  // `up` with a unique prefix; check ok() (and error()) afterwards.
  explicit EmulatedCluster(int hosts, const std::string& link = "1gbit", const std::string& delay = "0.1ms") {
    const CommandResult r = run_command(std::string(CLUSTER_SCRIPT) + " up --hosts " + std::to_string(hosts) +
                                        " --link " + link + " --delay " + delay + " --owner " +
                                        std::to_string(::getpid()));
    output_ = r.output;
    if (r.exit_code != 0) return;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("prefix=")) prefix_ = line.substr(7);
      if (line.starts_with("bridge=")) bridge_address_ = line.substr(line.find(' ') + 1);
      if (line.starts_with("host=")) {
        hosts_.push_back(line.substr(5, line.find(' ') - 5));
        addresses_.push_back(line.substr(line.find(' ') + 1));
      }
    }
  }
  ~EmulatedCluster() {
    if (!prefix_.empty()) run_command(std::string(CLUSTER_SCRIPT) + " down --prefix " + prefix_);
  }
  EmulatedCluster(const EmulatedCluster&) = delete;
  EmulatedCluster& operator=(const EmulatedCluster&) = delete;

  bool ok() const { return !prefix_.empty() && !hosts_.empty(); }
  const std::string& output() const { return output_; }  // what `up` printed
  const std::string& prefix() const { return prefix_; }
  const std::string& bridge_address() const { return bridge_address_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  // cohortrun's flags that launch on `hosts` (-H's list) of this cluster:
  // -H, the launch template (the namespaces' by default), the store on the
  // bridge.
  std::vector<std::string> launch_flags(const std::string& hosts,
                                        const std::string& launch_template = kLaunchTemplate) const {
    return {"-H", hosts, "--launch-template", launch_template, "--store-addr", bridge_address_};
  }

 private:
  std::string output_, prefix_, bridge_address_;
  std::vector<std::string> hosts_, addresses_;
};

// The fixture of a suite whose tests share one cluster of `Hosts` hosts,
// made before its first test and removed after its last; each test skips,
// saying why, where namespaces cannot be created.
template <int Hosts>
class SharedClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cluster_unavailable()) cluster_ = new EmulatedCluster(Hosts);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    SKIP_WITHOUT_CLUSTER();
    ASSERT_TRUE(cluster_ && cluster_->ok()) << "scripts/cluster.sh up failed:\n"
                                            << (cluster_ ? cluster_->output() : "");
  }

  static const std::string& host(int i) { return cluster_->hosts()[size_t(i)]; }

  inline static EmulatedCluster* cluster_ = nullptr;
};

}  // namespace cohort::testing
