// How a rank ended, in words, and the exit code cohortrun derives from it.
#pragma once

#include <string>

namespace cohort::launcher {

// A waitpid() status of a terminated process.
struct ExitStatus {
  int wait_status = 0;

  bool exited() const;    // exited normally (any code)
  bool signaled() const;  // killed by a signal
  int code() const;       // exit code when exited(), else -1
  int signal() const;     // signal number when signaled(), else 0
  bool success() const { return exited() && code() == 0; }
};

// "exited with code 3", "exited with code 0", "was killed by signal 9
// (SIGKILL)", "was killed by signal 11 (SIGSEGV, core dumped)".
std::string describe(ExitStatus status);

// cohortrun's exit code for a run whose first failing rank ended with
// `status`: 1 for a non-zero exit, 128 + signal for a signal (the shell
// convention), 0 for success.
int launcher_exit_code(ExitStatus status);

}  // namespace cohort::launcher
