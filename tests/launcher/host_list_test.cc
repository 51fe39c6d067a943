// Host lists from -H and hostfiles: what is accepted, how hosts merge, and
// the errors (with file and line) for malformed input.
#include "cohort/launcher/host_list.h"

#include <gtest/gtest.h>

#include <fstream>

#include "cohort/launcher/options.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::host_list_test {
namespace {

std::string host_list_error(const std::string& text) {
  try {
    parse_host_list(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string hostfile_error(const std::string& text) {
  try {
    parse_hostfile(text, "hosts.txt");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(HostList, ParsesNamesAndSlots) {
  EXPECT_EQ(parse_host_list("a:2,b:2"), (std::vector<HostSlots>{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(parse_host_list("node1"), (std::vector<HostSlots>{{"node1", 1}}));
  EXPECT_EQ(parse_host_list("10.0.0.2:3,user@n-2.example.org"),
            (std::vector<HostSlots>{{"10.0.0.2", 3}, {"user@n-2.example.org", 1}}));
}

TEST(HostList, RepeatedHostsAddTheirSlotsInFirstOrder) {
  EXPECT_EQ(parse_host_list("a,b,a:2"), (std::vector<HostSlots>{{"a", 3}, {"b", 1}}));
}

TEST(HostList, RejectsMalformedEntries) {
  EXPECT_EQ(host_list_error(""), "-H needs hosts, e.g. -H node1:2,node2:2");
  EXPECT_EQ(host_list_error("a,,b"), "-H 'a,,b' has an empty entry");
  EXPECT_EQ(host_list_error("a:x"), "-H 'a:x': slots must be an integer 1..4096, got 'x'");
  EXPECT_EQ(host_list_error("a:0"), "-H 'a:0': slots must be an integer 1..4096, got '0'");
  EXPECT_EQ(host_list_error("a:-1"), "-H 'a:-1': slots must be an integer 1..4096, got '-1'");
  EXPECT_EQ(host_list_error("a:"), "-H 'a:': slots must be an integer 1..4096, got ''");
  EXPECT_NE(host_list_error(":2").find("the host name is empty"), std::string::npos);
  EXPECT_NE(host_list_error("a b:2").find("contains ' '"), std::string::npos);
  EXPECT_NE(host_list_error("a;rm:2").find("contains ';'"), std::string::npos);
  EXPECT_NE(host_list_error("-x").find("starts with '-'"), std::string::npos);
  EXPECT_NE(host_list_error("a@b@c").find("not host or user@host"), std::string::npos);
  EXPECT_NE(host_list_error("a:4000,a:4000").find("more than 4096 slots"), std::string::npos);
}

TEST(Hostfile, ParsesLinesCommentsAndBlanks) {
  const std::string text =
      "# cluster\n"
      "\n"
      "node1 slots=4\n"
      "  node2\t# one slot\n"
      "node3 slots=2 max_slots=8\r\n"
      "node4 max_slots=3 slots=1";  // no final newline
  EXPECT_EQ(parse_hostfile(text, "f"),
            (std::vector<HostSlots>{{"node1", 4}, {"node2", 1}, {"node3", 2}, {"node4", 1}}));
}

TEST(Hostfile, RepeatedHostsAddTheirSlots) {
  EXPECT_EQ(parse_hostfile("a slots=2\nb\na slots=3\n", "f"), (std::vector<HostSlots>{{"a", 5}, {"b", 1}}));
}

TEST(Hostfile, ErrorsNameTheFileAndLine) {
  EXPECT_EQ(hostfile_error("a\nb slots=x\n"), "hostfile hosts.txt:2: slots must be an integer 1..4096, got 'x'");
  EXPECT_EQ(hostfile_error("a slots=0"), "hostfile hosts.txt:1: slots must be an integer 1..4096, got '0'");
  EXPECT_EQ(hostfile_error("# c\n\nnode1 4\n"),
            "hostfile hosts.txt:3: expected 'host [slots=N]' (one host per line), got 'node1 4'");
  EXPECT_EQ(hostfile_error("node1 cpus=4\n"),
            "hostfile hosts.txt:1: unknown attribute 'cpus' (cohortrun understands slots=N), got 'node1 cpus=4'");
  EXPECT_EQ(hostfile_error("a\nb\nslots=2\n"),
            "hostfile hosts.txt:3: a line must start with a host name, then slots=N, got 'slots=2'");
  EXPECT_EQ(hostfile_error("n slots=1 slots=2"), "hostfile hosts.txt:1: slots is given twice, got 'n slots=1 slots=2'");
  EXPECT_EQ(hostfile_error("n max_slots=q"), "hostfile hosts.txt:1: max_slots must be an integer 1..4096, got 'q'");
  EXPECT_NE(hostfile_error("ok\nbad;host\n").find("hostfile hosts.txt:2: the host name 'bad;host' contains ';'"),
            std::string::npos);
  EXPECT_EQ(hostfile_error("# only comments\n\n"), "hostfile hosts.txt: no hosts (expected lines like 'node1 slots=2')");
  EXPECT_EQ(hostfile_error(""), "hostfile hosts.txt: no hosts (expected lines like 'node1 slots=2')");
}

TEST(Hostfile, ErrorsAreOneLine) {
  for (const std::string text : {"a\n\x01\n", "a slots=\n", "a b c\n"}) {
    const std::string error = hostfile_error(text);
    EXPECT_NE(error, "<no error>") << text;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(Hostfile, ReadsAFile) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/hosts";
  std::ofstream(path) << "alpha slots=2\nbeta slots=1\n";
  EXPECT_EQ(read_hostfile(path), (std::vector<HostSlots>{{"alpha", 2}, {"beta", 1}}));
  EXPECT_EQ(total_slots(read_hostfile(path)), 3);
  EXPECT_EQ(format_host_list(read_hostfile(path)), "alpha:2,beta:1");
  std::ofstream(path) << "alpha slots=two\n";
  try {
    read_hostfile(path);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "hostfile " + path + ":1: slots must be an integer 1..4096, got 'two'");
  }
  EXPECT_THROW(read_hostfile(dir.path() + "/missing"), UsageError);
}

}  // namespace
}  // namespace cohort::launcher::host_list_test
