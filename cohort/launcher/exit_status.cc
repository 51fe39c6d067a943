#include "cohort/launcher/exit_status.h"

#include <sys/wait.h>

#include "cohort/launcher/signals.h"

namespace cohort::launcher {

bool ExitStatus::exited() const { return WIFEXITED(wait_status); }
bool ExitStatus::signaled() const { return WIFSIGNALED(wait_status); }
int ExitStatus::code() const { return exited() ? WEXITSTATUS(wait_status) : -1; }
int ExitStatus::signal() const { return signaled() ? WTERMSIG(wait_status) : 0; }

std::string describe(ExitStatus status) {
  if (status.exited()) return "exited with code " + std::to_string(status.code());
  if (status.signaled()) {
    std::string text = "was killed by signal " + std::to_string(status.signal()) + " (" +
                       signal_name(status.signal());
    if (WCOREDUMP(status.wait_status)) text += ", core dumped";
    return text + ")";
  }
  return "ended with wait status " + std::to_string(status.wait_status);
}

int launcher_exit_code(ExitStatus status) {
  if (status.success()) return 0;
  if (status.signaled()) return 128 + status.signal();
  return 1;
}

}  // namespace cohort::launcher
