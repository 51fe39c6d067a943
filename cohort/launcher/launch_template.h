// The launch template: how cohortrun starts a rank on another host.
//
// A template is a command line whose words may contain "{host}", replaced by
// the host's name; the remote part of the rank's command is appended as
// further words. The default, `ssh -o BatchMode=yes {host}`, logs in without
// prompting; `ip netns exec {host}` starts ranks in the network namespaces of
// an emulated cluster (scripts/cluster.sh). Words are split at blanks;
// single and double quotes group words ('a b', "a b") and a backslash quotes
// the next character, as in a POSIX shell, but nothing is expanded.
//
// The appended words are cohortrun's own path and "--remote-rank N" (see
// remote_rank.h): plain words that a remote shell (ssh runs its arguments
// through one) and a program that execs its arguments (ip netns exec, docker
// exec, srun) read alike. The rank's program, arguments, working directory
// and environment, the job secret included, travel on the command's standard
// input, never on a command line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::launcher {

inline constexpr const char* kDefaultLaunchTemplate = "ssh -o BatchMode=yes {host}";

class LaunchTemplate {
 public:
  // Throws UsageError for an empty template, an unterminated quote, or one
  // without "{host}".
  explicit LaunchTemplate(std::string_view text = kDefaultLaunchTemplate);

  // The template's words with {host} replaced, then `command`.
  std::vector<std::string> expand(const std::string& host, const std::vector<std::string>& command) const;

  const std::string& text() const { return text_; }
  const std::vector<std::string>& words() const { return words_; }

 private:
  std::string text_;
  std::vector<std::string> words_;
};

// True when `word` means the same to a POSIX shell as it does unquoted
// (letters, digits and _ - . / : , = + @ %), so it can be appended to a
// template whether or not a remote shell reads it.
bool is_shell_safe(std::string_view word);

// `words` joined by spaces, each single-quoted when not shell-safe: for
// messages and the dry run.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace cohort::launcher
