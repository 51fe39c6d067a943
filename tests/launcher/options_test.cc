#include "cohort/launcher/options.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/launcher/job_id.h"

namespace cohort::launcher::options_test {
namespace {

LaunchOptions parse(std::vector<std::string> args) { return parse_options(args); }

std::string error_of(std::vector<std::string> args) {
  try {
    parse_options(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Options, ParsesEveryFlag) {
  const LaunchOptions o = parse({"-np", "4", "--backend", "shm", "--env", "A=1", "--env", "B=x=y", "--port",
                                 "29500", "--job-id", "run_1.a", "--grace-s", "0.5", "--signal-grace-s", "7.5", "--output", "pipe",
                                 "--verbose", "./train",
                                 "--lr", "0.1"});
  EXPECT_EQ(o.num_ranks, 4);
  EXPECT_EQ(o.backend, "shm");
  ASSERT_EQ(o.env.size(), 2u);
  EXPECT_EQ(o.env[0], (std::pair<std::string, std::string>{"A", "1"}));
  EXPECT_EQ(o.env[1], (std::pair<std::string, std::string>{"B", "x=y"}));
  EXPECT_EQ(o.port, 29500);
  EXPECT_EQ(o.job_id, "run_1.a");
  EXPECT_DOUBLE_EQ(o.grace_s, 0.5);
  EXPECT_EQ(o.output, OutputMode::pipe);
  EXPECT_DOUBLE_EQ(o.signal_grace_s, 7.5);
  EXPECT_TRUE(o.verbose);
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.command, (std::vector<std::string>{"./train", "--lr", "0.1"}));
}

TEST(Options, DefaultsWhenOnlyTheRequiredAreGiven) {
  const LaunchOptions o = parse({"-np", "2", "prog"});
  EXPECT_EQ(o.num_ranks, 2);
  EXPECT_TRUE(o.backend.empty());
  EXPECT_TRUE(o.env.empty());
  EXPECT_EQ(o.port, 0);
  EXPECT_TRUE(o.job_id.empty());
  EXPECT_DOUBLE_EQ(o.grace_s, 3.0);
  EXPECT_EQ(o.output, OutputMode::pty);
  EXPECT_DOUBLE_EQ(o.signal_grace_s, 30.0);
  EXPECT_FALSE(o.verbose);
  EXPECT_EQ(o.command, std::vector<std::string>{"prog"});
}

TEST(Options, AcceptsInlineValuesAndAliases) {
  EXPECT_EQ(parse({"-np=3", "p"}).num_ranks, 3);
  EXPECT_EQ(parse({"-n", "5", "p"}).num_ranks, 5);
  EXPECT_EQ(parse({"--np=6", "p"}).num_ranks, 6);
  EXPECT_EQ(parse({"-np", "1", "--env=K=V", "p"}).env[0].second, "V");
  EXPECT_EQ(parse({"-np", "1", "--env", "EMPTY=", "p"}).env[0].second, "");
  EXPECT_TRUE(parse({"-np", "1", "-v", "p"}).verbose);
}

TEST(Options, EverythingAfterTheProgramBelongsToIt) {
  const LaunchOptions o = parse({"-np", "2", "prog", "-np", "9", "--help"});
  EXPECT_EQ(o.num_ranks, 2);
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog", "-np", "9", "--help"}));
  const LaunchOptions dashed = parse({"-np", "2", "--", "-weird-name", "x"});
  EXPECT_EQ(dashed.command, (std::vector<std::string>{"-weird-name", "x"}));
}

TEST(Options, HelpNeedsNothingElse) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  const LaunchOptions o = parse({"-np", "2", "--help", "prog"});
  EXPECT_TRUE(o.help);
  EXPECT_EQ(o.command, std::vector<std::string>{"prog"});
}

TEST(Options, RejectsBadRankCounts) {
  EXPECT_EQ(error_of({"prog"}), "-np N is required (the number of ranks to start)");
  EXPECT_EQ(error_of({"-np"}), "-np needs a value");
  EXPECT_EQ(error_of({"-np", "0", "p"}), "-np needs a positive number of ranks, got '0'");
  EXPECT_EQ(error_of({"-np", "-1", "p"}), "-np needs a positive number of ranks, got '-1'");
  EXPECT_EQ(error_of({"-np", "2x", "p"}), "-np needs a positive number of ranks, got '2x'");
  EXPECT_EQ(error_of({"-np", "", "p"}), "-np needs a positive number of ranks, got ''");
  EXPECT_NE(error_of({"-np", "99999999999999999999", "p"}).find("positive number"), std::string::npos);
  EXPECT_NE(error_of({"-np", "5000", "p"}).find("4096"), std::string::npos);
}

TEST(Options, ElasticFlags) {
  const LaunchOptions o = parse({"-np", "4", "--min-np", "2", "--max-restarts", "5", "--elastic-timeout", "30", "p"});
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.min_np, 2);
  EXPECT_EQ(o.max_restarts, 5);
  EXPECT_EQ(o.elastic_timeout_s, 30);
  EXPECT_FALSE(parse({"-np", "4", "p"}).elastic());
  EXPECT_EQ(parse({"-np", "4", "--min-np", "4", "p"}).max_restarts, 3);
  EXPECT_EQ(error_of({"-np", "2", "--min-np", "3", "p"}), "--min-np 3 is more than the 2 rank(s) started (-np)");
  EXPECT_EQ(error_of({"-np", "2", "--min-np", "0", "p"}), "--min-np needs a positive number up to 4096, got '0'");
  EXPECT_EQ(error_of({"-np", "2", "--max-restarts", "1", "p"}),
            "--max-restarts and --elastic-timeout need --min-np (an elastic job)");
  EXPECT_EQ(error_of({"-np", "2", "--min-np", "1", "--elastic-timeout", "0", "p"}),
            "--elastic-timeout needs seconds in (0, 86400], got '0'");
  EXPECT_EQ(parse({"-H", "a:2,b:1", "--min-np", "2", "p"}).min_np, 2);  // across hosts too
  // Host discovery: its first answer places the ranks; --max-np caps how
  // many start when -np is not given.
  const LaunchOptions found = parse({"--host-discovery-script", "echo a:4; echo b:1", "--min-np", "1", "--max-np", "2", "p"});
  EXPECT_EQ(found.num_ranks, 2);
  EXPECT_EQ(found.hosts, (std::vector<HostSlots>{{"a", 4}, {"b", 1}}));
  EXPECT_EQ(parse({"--host-discovery-script", "echo a:4", "--min-np", "1", "p"}).num_ranks, 4);
  EXPECT_EQ(error_of({"--host-discovery-script", "echo a:4", "p"}),
            "--host-discovery-script needs --min-np (an elastic job)");
  EXPECT_EQ(error_of({"--host-discovery-script", "exit 2", "--min-np", "1", "p"}),
            "host discovery script 'exit 2' exited with code 2");
  EXPECT_EQ(error_of({"-np", "2", "--min-np", "1", "--max-np", "3", "p"}),
            "--max-np needs --host-discovery-script (hosts that can grow)");
  EXPECT_EQ(error_of({"-np", "2", "--min-np", "1", "--backend", "mpi", "p"}),
            "--min-np (elastic) cannot run on --backend mpi: its world cannot change size");
}

TEST(Options, RejectsMissingProgramAndUnknownFlags) {
  EXPECT_NE(error_of({"-np", "2"}).find("no program to run"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--"}).find("no program to run"), std::string::npos);
  EXPECT_EQ(error_of({"--frobnicate", "-np", "2", "p"}), "unknown flag '--frobnicate'");
  EXPECT_EQ(error_of({"-np", "2", "--verbose=yes", "p"}), "--verbose takes no value, got '--verbose=yes'");
}

TEST(Options, RejectsMalformedValues) {
  EXPECT_EQ(error_of({"-np", "2", "--env", "NOVALUE", "p"}), "--env needs KEY=VALUE, got 'NOVALUE'");
  EXPECT_NE(error_of({"-np", "2", "--env", "=v", "p"}).find("is not a variable name"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--env", "1X=v", "p"}).find("is not a variable name"), std::string::npos);
  EXPECT_EQ(error_of({"-np", "2", "--backend", "nccl", "p"}),
            "--backend must be auto, shm, gloo, mpi or hierarchical, got 'nccl'");
  EXPECT_NE(error_of({"-np", "2", "--port", "65536", "p"}).find("--port needs"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--port", "http", "p"}).find("--port needs"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--grace-s", "-1", "p"}).find("--grace-s needs"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--grace-s", "nan", "p"}).find("--grace-s needs"), std::string::npos);
  EXPECT_EQ(error_of({"-np", "2", "--signal-grace-s", "soon", "p"}),
            "--signal-grace-s needs seconds between 0 and 3600, got 'soon'");
  EXPECT_NE(error_of({"-np", "2", "--signal-grace-s", "3601", "p"}).find("between 0 and 3600"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--job-id", "a-b", "p"}).find("contains '-'"), std::string::npos);
  EXPECT_EQ(error_of({"-np", "2", "--port"}), "--port needs a value");
  EXPECT_EQ(error_of({"-np", "2", "--output", "tty", "p"}), "--output must be pty or pipe, got 'tty'");
}

TEST(Options, LauncherVariablesCannotBeOverridden) {
  for (const char* name : launcher_variables()) {
    const std::string error = error_of({"-np", "2", "--env", std::string(name) + "=1", "p"});
    EXPECT_NE(error.find("is set by cohortrun"), std::string::npos) << name << ": " << error;
  }
  EXPECT_NE(error_of({"-np", "2", "--backend", "shm", "--env", "COHORT_BACKEND=auto", "p"}).find("conflicts"),
            std::string::npos);
  EXPECT_EQ(parse({"-np", "2", "--env", "COHORT_BACKEND=shm", "p"}).env[0].first, "COHORT_BACKEND");
}

TEST(Options, TorchMasterIsGivenWholeOrNotAtAll) {
  EXPECT_EQ(error_of({"-np", "2", "--env", "MASTER_PORT=29500", "p"}),
            "--env MASTER_PORT needs --env MASTER_ADDR too: give torch.distributed's master whole, or neither for "
            "cohortrun to choose it");
  EXPECT_NE(error_of({"-np", "2", "--env", "MASTER_ADDR=n0", "p"}).find("needs --env MASTER_PORT"), std::string::npos);
  EXPECT_EQ(parse({"-np", "2", "--env", "MASTER_ADDR=n0", "--env", "MASTER_PORT=29500", "p"}).env.size(), 2u);
}

TEST(Options, ErrorsAreOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {}, {"-np", "x", "p"}, {"--env", "A\nB=1", "-np", "1", "p"}, {"-np", "1", "--job-id", "", "p"}}) {
    const std::string error = error_of(args);
    EXPECT_NE(error, "<no error>");
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(Options, UsageListsFlagsAndTunables) {
  const std::string text = usage_text();
  for (const char* needle : {"-np", "--backend", "--env", "--port", "--job-id", "--grace-s", "--signal-grace-s", "--verbose",
                             "--help", "COHORT_TIMEOUT_S", "COHORT_SHM_SLOT_BYTES", "OMP_NUM_THREADS", "-H, --host",
                             "--hostfile", "--launch-template", "--store-addr", "--start-timeout",
                             "--network-interface", "--remote-cohortrun", "--dry-run", "COHORT_HOST", "--timeline",
                             "--output pty|pipe"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle;
}

TEST(Options, AcceptsEveryBackend) {
  for (const char* backend : {"auto", "shm", "gloo", "mpi", "hierarchical"})
    EXPECT_EQ(parse({"-np", "2", "--backend", backend, "p"}).backend, backend);
}

TEST(Options, HostsGiveTheDefaultRankCount) {
  const LaunchOptions o = parse({"-H", "a:2,b:3", "prog"});
  EXPECT_EQ(o.num_ranks, 5);
  EXPECT_EQ(o.hosts, (std::vector<HostSlots>{{"a", 2}, {"b", 3}}));
  EXPECT_EQ(parse({"-np", "3", "--host", "a:2,b:3", "prog"}).num_ranks, 3);
  EXPECT_EQ(error_of({"-np", "6", "-H", "a:2,b:3", "prog"}), "-np 6 is more than the 5 slot(s) of the hosts a:2,b:3");
  EXPECT_NE(error_of({"-H", "a", "--hostfile", "/nonexistent", "prog"}).find("conflicts with -H"), std::string::npos);
  EXPECT_NE(error_of({"--hostfile", "/nonexistent/hosts", "prog"}).find("cannot read it"), std::string::npos);
  // Without hosts, -np stays required.
  EXPECT_EQ(error_of({"prog"}), "-np N is required (the number of ranks to start)");
}

TEST(Options, ParsesTheMultiHostFlags) {
  const LaunchOptions o =
      parse({"-H", "n1", "--launch-template", "ip netns exec {host}", "--store-addr", "10.1.2.1", "--start-timeout",
             "2.5", "--network-interface", "eth0", "--remote-cohortrun", "/opt/cohort/bin/cohortrun", "--dry-run",
             "prog"});
  EXPECT_EQ(o.launch_template, "ip netns exec {host}");
  EXPECT_EQ(o.store_addr, "10.1.2.1");
  EXPECT_DOUBLE_EQ(o.start_timeout_s, 2.5);
  EXPECT_EQ(o.network_interface, "eth0");
  EXPECT_EQ(o.remote_cohortrun, "/opt/cohort/bin/cohortrun");
  EXPECT_TRUE(o.dry_run);
  const LaunchOptions d = parse({"-np", "1", "prog"});
  EXPECT_EQ(d.launch_template, "ssh -o BatchMode=yes {host}");
  EXPECT_DOUBLE_EQ(d.start_timeout_s, 60);
  EXPECT_FALSE(d.dry_run);
}

TEST(Options, TimelineIsAnAbsolutePathForEveryRank) {
  const LaunchOptions o = parse({"-np", "2", "--timeline", "t.json", "prog"});
  EXPECT_EQ(o.timeline, (std::filesystem::current_path() / "t.json").string());
  EXPECT_EQ(parse({"-np", "2", "--timeline=/tmp/x.json", "prog"}).timeline, "/tmp/x.json");
  EXPECT_NE(error_of({"-np", "2", "--timeline", "", "p"}).find("--timeline needs"), std::string::npos);
  EXPECT_NE(error_of({"-np", "2", "--timeline", "a.json", "--env", "COHORT_TIMELINE=b.json", "p"}).find("conflicts"),
            std::string::npos);
}

TEST(Options, RejectsMalformedMultiHostValues) {
  EXPECT_NE(error_of({"-H", "a", "--launch-template", "ssh", "p"}).find("has no {host}"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--launch-template", "ssh '{host}", "p"}).find("unterminated single quote"),
            std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--start-timeout", "0", "p"}).find("--start-timeout needs"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--start-timeout", "x", "p"}).find("--start-timeout needs"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--store-addr", "", "p"}).find("--store-addr needs"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--network-interface", "a/b", "p"}).find("--network-interface needs"),
            std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--remote-cohortrun", "bin/cohortrun", "p"}).find("absolute path"),
            std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--remote-cohortrun", "/my dir/cohortrun", "p"}).find("absolute path"),
            std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--dry-run=1", "p"}).find("takes no value"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a:0", "p"}).find("slots must be"), std::string::npos);
  EXPECT_NE(error_of({"-H", "a", "--network-interface", "eth0", "--env", "COHORT_IFACE=lo", "p"}).find("conflicts"),
            std::string::npos);
}

TEST(JobId, GeneratedIdsAreSafeAndDistinct) {
  const std::string a = generate_job_id();
  const std::string b = generate_job_id();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 22u);
  EXPECT_EQ(job_id_problem(a), "");
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
}

TEST(JobId, ProblemsAreNamed) {
  EXPECT_EQ(job_id_problem("train_3.b"), "");
  EXPECT_NE(job_id_problem(""), "");
  EXPECT_NE(job_id_problem(std::string(65, 'a')), "");
  EXPECT_EQ(job_id_problem(std::string(64, 'a')), "");
  EXPECT_NE(job_id_problem("a/b").find("'/'"), std::string::npos);
  EXPECT_NE(job_id_problem("a-b").find("'-'"), std::string::npos);
  EXPECT_NE(job_id_problem("a b"), "");
}

}  // namespace
}  // namespace cohort::launcher::options_test

namespace cohort::launcher::options_test {
namespace {

TEST(Options, DashboardAndReportFlags) {
  const LaunchOptions o =
      parse({"-np", "2", "--dashboard", "0.0.0.0:8265", "--dashboard-linger", "30", "--report", "/tmp/run.html", "p"});
  EXPECT_EQ(o.dashboard, "0.0.0.0:8265");
  EXPECT_DOUBLE_EQ(o.dashboard_linger_s, 30);
  EXPECT_EQ(o.report, "/tmp/run.html");
  const LaunchOptions relative = parse({"-np", "1", "--report", "run.html", "p"});
  ASSERT_FALSE(relative.report.empty());
  EXPECT_EQ(relative.report.front(), '/');  // absolute: the job may change directory
  EXPECT_EQ(relative.report.substr(relative.report.size() - 9), "/run.html");
  EXPECT_THROW(parse({"-np", "1", "--dashboard", "host:99999", "p"}), UsageError);
  EXPECT_THROW(parse({"-np", "1", "--dashboard", "", "p"}), UsageError);
  EXPECT_THROW(parse({"-np", "1", "--dashboard-linger", "5", "p"}), UsageError);  // nothing to keep serving
  EXPECT_THROW(parse({"-np", "1", "--report", "", "p"}), UsageError);
}

TEST(Options, StoreAddrTakesAPort) {
  LaunchOptions o = parse({"-np", "1", "--store-addr", "10.0.0.1:29500", "p"});
  EXPECT_EQ(o.store_addr, "10.0.0.1");
  EXPECT_EQ(o.port, 29500);
  o = parse({"-np", "1", "--store-addr", "[fd00::1]:29501", "p"});
  EXPECT_EQ(o.store_addr, "fd00::1");
  EXPECT_EQ(o.port, 29501);
  o = parse({"-np", "1", "--port", "7", "--store-addr", "fd00::1", "p"});  // a bare IPv6 address: no port
  EXPECT_EQ(o.store_addr, "fd00::1");
  EXPECT_EQ(o.port, 7);
  EXPECT_EQ(parse({"-np", "1", "--store-addr=node1:0", "p"}).store_addr, "node1");
  EXPECT_EQ(error_of({"-np", "1", "--store-addr", "10.0.0.1:http", "p"}),
            "--store-addr's port must be a TCP port 0..65535, got '10.0.0.1:http'");
  EXPECT_EQ(error_of({"-np", "1", "--store-addr", "10.0.0.1:", "p"}),
            "--store-addr's port must be a TCP port 0..65535, got '10.0.0.1:'");
  EXPECT_EQ(error_of({"-np", "1", "--store-addr", "[fd00::1]", "p"}),
            "--store-addr takes an IPv6 address with a port as [ADDRESS]:PORT, got '[fd00::1]'");
}

TEST(Options, RefusesMultiHostLaunchesThatCannotWork) {
  // Hosts that are other machines (addresses, so nothing is looked up).
  const std::string two_hosts = "10.0.0.2:2,10.0.0.3:2";
  std::string e = error_of({"-H", two_hosts, "--store-addr", "127.0.0.1", "p"});
  EXPECT_NE(e.find("--store-addr 127.0.0.1 is a loopback address, which reaches only this machine: the ranks on "
                   "10.0.0.2 could never reach the store there"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of({"-H", two_hosts, "--store-addr", "localhost", "p"}).find("--store-addr localhost is a loopback"),
            std::string::npos);
  EXPECT_NE(error_of({"-H", two_hosts, "--store-addr", "::1", "p"}).find("is a loopback address"), std::string::npos);
  // Loopback is right when no rank runs elsewhere: hosts that are loopback
  // addresses themselves, or remote hosts -np leaves empty.
  EXPECT_EQ(parse({"-H", "127.0.0.2:2,127.0.0.3:2", "--store-addr", "127.0.0.1", "p"}).num_ranks, 4);
  EXPECT_EQ(parse({"-np", "2", "-H", "localhost:2,10.0.0.2:2", "--store-addr", "127.0.0.1", "p"}).num_ranks, 2);
  EXPECT_EQ(parse({"-H", two_hosts, "--store-addr", "10.0.0.1", "p"}).store_addr, "10.0.0.1");

  e = error_of({"-H", two_hosts, "--backend", "shm", "p"});
  EXPECT_EQ(e,
            "--backend shm cannot join ranks on 2 hosts (10.0.0.2:2,10.0.0.3:2): shared memory reaches the ranks "
            "of one host only; use --backend hierarchical (shared memory within each host, gloo across them) or "
            "gloo");
  EXPECT_NE(error_of({"-H", two_hosts, "--env", "COHORT_BACKEND=shm", "p"}).find("--env COHORT_BACKEND=shm cannot"),
            std::string::npos);
  EXPECT_EQ(parse({"-np", "2", "-H", two_hosts, "--backend", "shm", "p"}).backend, "shm");  // one host's ranks

  e = error_of({"-H", two_hosts, "--network-interface", "lo", "p"});
  EXPECT_NE(e.find("--network-interface lo is a loopback interface, which reaches no other host: the ranks on "
                   "10.0.0.2"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of({"-H", two_hosts, "--env", "COHORT_IFACE=lo", "p"}).find("--env COHORT_IFACE=lo is a loopback"),
            std::string::npos);
  EXPECT_EQ(parse({"-H", "127.0.0.2:2", "--network-interface", "lo", "p"}).network_interface, "lo");
}

TEST(Options, AProgramThatLooksLikeAHostIsRefusedWithTheFix) {
  // A space for a comma: b:2 became the program, --dry-run its argument.
  std::string e = error_of({"-H", "a:2", "b:2", "--store-addr", "10.0.0.1", "--dry-run", "prog"});
  EXPECT_EQ(e,
            "the program 'b:2' looks like a host:slots, and every word after it (flags such as --store-addr or "
            "--dry-run included) would be its arguments; separate the hosts with commas, without spaces: -H "
            "a:2,b:2");
  EXPECT_NE(error_of({"-H", "a:2", "node-2.lan:2", "c:1", "prog"}).find("-H a:2,node-2.lan:2,c:1"), std::string::npos);
  const std::string hostfile =
      (std::filesystem::temp_directory_path() / ("options_test_hosts." + std::to_string(::getpid()))).string();
  std::ofstream(hostfile) << "a slots=2\n";
  EXPECT_NE(error_of({"--hostfile", hostfile, "b:2", "prog"}).find("put every host in the hostfile"),
            std::string::npos);
  std::filesystem::remove(hostfile);
  // A program's arguments may look like hosts; without hosts nothing is guessed.
  EXPECT_EQ(parse({"-H", "a:2", "prog", "b:2"}).command, (std::vector<std::string>{"prog", "b:2"}));
  EXPECT_EQ(parse({"-np", "1", "b:2"}).command, (std::vector<std::string>{"b:2"}));
}

TEST(Options, CheckNeedsNoProgramAndTakesItsFlags) {
  const LaunchOptions o = parse(
      {"--check", "-H", "a:2,b:2", "--check-topology", "topo.json", "--check-probe", "/opt/cohort/bin/cohort-probe"});
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.num_ranks, 4);
  EXPECT_TRUE(o.command.empty());
  ASSERT_FALSE(o.check_topology.empty());
  EXPECT_EQ(o.check_topology.front(), '/');  // made absolute
  EXPECT_TRUE(o.check_topology.ends_with("/topo.json"));
  EXPECT_EQ(o.check_probe, "/opt/cohort/bin/cohort-probe");
  // The launch line with --check in front: its program is kept, not run.
  EXPECT_EQ(parse({"--check", "-np", "2", "prog", "x"}).command, (std::vector<std::string>{"prog", "x"}));
  EXPECT_EQ(error_of({"-np", "2", "--check-topology", "t.json", "prog"}),
            "--check-topology and --check-probe need --check");
  EXPECT_THROW(parse({"--check", "-np", "2", "--check-probe", "relative/probe"}), UsageError);
  EXPECT_THROW(parse({"--check", "-np", "2", "--check-topology", ""}), UsageError);
  EXPECT_THROW(parse({"--check=1", "-np", "2"}), UsageError);
  EXPECT_NE(usage_text().find("--check-topology F"), std::string::npos);
}

}  // namespace
}  // namespace cohort::launcher::options_test
