// cohortrun: starts and supervises the ranks of a cohort job on this
// machine. See usage_text() in options.cc or `cohortrun --help`.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cohort/launcher/launcher.h"
#include "cohort/launcher/options.h"
#include "cohort/launcher/preflight.h"
#include "cohort/launcher/remote_rank.h"
#include "cohort/launcher/slurm_allocation.h"
#include "cohort/rendezvous/discovery.h"

int main(int argc, char** argv) {
  // Pipes created later must not land on fds 0-2 if the caller closed them:
  // a rank's dup2() onto the same number would keep close-on-exec set.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);

  using namespace cohort::launcher;
  const std::vector<std::string> args(argv + 1, argv + argc);
  // The remote end of a rank started through the launch template.
  if (!args.empty() && args.front() == kRemoteRankFlag) return run_remote_rank(args);
  LaunchOptions options;
  try {
    options = parse_options(args, slurm_allocation(cohort::rendezvous::process_environment()));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cohortrun: error: %s (see cohortrun --help)\n", e.what());
    return 2;
  }
  if (options.help) {
    const std::string text = usage_text();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  try {
    if (options.check) return run_check(options);
    return run_job(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: error: %s\n", e.what());
    return 1;
  }
}
