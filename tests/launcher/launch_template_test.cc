// Launch templates: word splitting, {host} substitution, and the quoting
// used for messages.
#include "cohort/launcher/launch_template.h"

#include <gtest/gtest.h>

#include "cohort/launcher/options.h"

namespace cohort::launcher::launch_template_test {
namespace {

using Words = std::vector<std::string>;

TEST(LaunchTemplate, DefaultIsSshInBatchMode) {
  const LaunchTemplate t;
  EXPECT_EQ(t.expand("n1", {"/bin/cohortrun", "--remote-rank", "3"}),
            (Words{"ssh", "-o", "BatchMode=yes", "n1", "/bin/cohortrun", "--remote-rank", "3"}));
}

TEST(LaunchTemplate, ReplacesHostInsideWordsAndEveryTime) {
  const LaunchTemplate t("ip netns exec {host}");
  EXPECT_EQ(t.expand("cc1-h0", {"x"}), (Words{"ip", "netns", "exec", "cc1-h0", "x"}));
  const LaunchTemplate u("ssh -l me {host} --tag=at-{host}");
  EXPECT_EQ(u.expand("h", {}), (Words{"ssh", "-l", "me", "h", "--tag=at-h"}));
}

TEST(LaunchTemplate, QuotesGroupWordsWithoutExpansion) {
  const LaunchTemplate t(R"(ssh -o "ProxyCommand=ssh gw -W %h:%p" '{host}' a\ b $HOME)");
  EXPECT_EQ(t.words(), (Words{"ssh", "-o", "ProxyCommand=ssh gw -W %h:%p", "{host}", "a b", "$HOME"}));
}

TEST(LaunchTemplate, RejectsMalformedTemplates) {
  EXPECT_THROW(LaunchTemplate(""), UsageError);
  EXPECT_THROW(LaunchTemplate("   "), UsageError);
  EXPECT_THROW(LaunchTemplate("ssh node1"), UsageError);
  EXPECT_THROW(LaunchTemplate("ssh '{host}"), UsageError);
  EXPECT_THROW(LaunchTemplate("ssh {host}\\"), UsageError);
}

TEST(LaunchTemplate, ShellSafeWordsAndJoining) {
  EXPECT_TRUE(is_shell_safe("/usr/bin/cohortrun"));
  EXPECT_TRUE(is_shell_safe("--remote-rank"));
  EXPECT_FALSE(is_shell_safe(""));
  EXPECT_FALSE(is_shell_safe("a b"));
  EXPECT_FALSE(is_shell_safe("$HOME"));
  EXPECT_FALSE(is_shell_safe("a'b"));
  EXPECT_EQ(shell_join({"prog", "a b", "it's", "--x=1"}), R"(prog 'a b' 'it'\''s' --x=1)");
  EXPECT_EQ(shell_join({""}), "''");
}

}  // namespace
}  // namespace cohort::launcher::launch_template_test
