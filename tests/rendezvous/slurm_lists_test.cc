#include "cohort/rendezvous/slurm_lists.h"

#include <gtest/gtest.h>

#include "cohort/common/error.h"

namespace cohort::rendezvous::slurm_lists_test {
namespace {

using Hosts = std::vector<std::string>;

std::string error_of(const std::string& list) {
  try {
    expand_slurm_host_list("SLURM_JOB_NODELIST", list);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(SlurmLists, ExpandsHostListsInSlurmsOrder) {
  EXPECT_EQ(expand_slurm_host_list("V", "vm"), Hosts{"vm"});
  EXPECT_EQ(expand_slurm_host_list("V", "node[07-09,12],gpu1"),
            (Hosts{"node07", "node08", "node09", "node12", "gpu1"}));
  // Several range sets in a name multiply, the last one varying fastest.
  EXPECT_EQ(expand_slurm_host_list("V", "rack[1-2]-n[3-4]"), (Hosts{"rack1-n3", "rack1-n4", "rack2-n3", "rack2-n4"}));
  // Padding is the width of the range's first number, kept past it.
  EXPECT_EQ(expand_slurm_host_list("V", "n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_host_list("V", "a[5],b.example.org"), (Hosts{"a5", "b.example.org"}));
  EXPECT_EQ(expand_slurm_host_list("V", "c[1-1000]").size(), 1000u);
}

TEST(SlurmLists, AMalformedHostListNamesTheVariableAndWhatIsWrong) {
  for (const auto& [list, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "no host"},
           {"node[1-3", "a '[' without its ']'"},
           {"node1-3]", "a ']' without its '['"},
           {"node[3-1]", "the range 3-1 runs backwards"},
           {"node[a-b]", "'[a-b]' is not a range set"},
           {"node[]", "'[]' is not a range set"},
           {"a,,b", "an empty host name"},
           {"n[0-9999999]", "more than 1048576 hosts"},
           {"r[0-999]-n[0-9999]", "more than 1048576 hosts"},
       }) {
    const std::string message = error_of(list);
    EXPECT_NE(message.find("SLURM_JOB_NODELIST='" + list + "' is not a Slurm host list"), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << list << ": " << message;
  }
}

TEST(SlurmLists, ExpandsTasksPerNodeLists) {
  EXPECT_EQ(parse_slurm_tasks_per_node("V", "2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_slurm_tasks_per_node("V", "4"), (std::vector<int>{4}));
  EXPECT_EQ(parse_slurm_tasks_per_node("V", "0,1(x2)"), (std::vector<int>{0, 1, 1}));
  for (const std::string bad : {"", "x", "-1", "2(x)", "2(x0)", "2(3)", "2(x3", "1,,2", "2(x2000000)"}) {
    try {
      parse_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE='" + bad + "' is not a Slurm tasks-per-node list"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace cohort::rendezvous::slurm_lists_test
