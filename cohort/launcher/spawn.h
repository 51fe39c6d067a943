// Starting one rank: find the program, fork and exec it with its stdout and
// stderr on pipes the launcher reads.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "cohort/common/error.h"

namespace cohort::launcher {

// The program could not be started. exit_code() is the shell's convention:
// 127 when it was not found, 126 when it exists but cannot be executed.
class ExecError : public Error {
 public:
  ExecError(const std::string& what, int exit_code) : Error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// The path execve() should run for `program`: itself when it contains '/',
// else the first executable match in the ':'-separated `path_variable`
// (an empty entry is the current directory; an empty variable means
// "/bin:/usr/bin", as for execvp). Throws ExecError saying what is missing.
std::string resolve_program(const std::string& program, const std::string& path_variable);

struct SpawnRequest {
  std::string path;               // from resolve_program
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> envp;  // "K=V"
};

struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends: non-blocking, close-on-exec; the caller closes them
  int stderr_fd = -1;
};

// Forks and execs `request`. The child runs in its own process group (its
// pgid is its pid, so the launcher can signal it and what it spawns, and a
// Ctrl-C in the terminal reaches only the launcher, which forwards it), gets
// SIGKILL when the launcher dies (PR_SET_PDEATHSIG; only the calling thread
// must stay alive, so call this from the main thread), reads stdin from
// /dev/null, writes stdout and stderr to the pipes, inherits no other file
// descriptor, and starts with an empty signal mask and SIGPIPE at its
// default. Returns once the exec succeeded; when it failed, reaps the child
// and throws ExecError with the reason. Safe in a multithreaded process:
// the child only makes async-signal-safe calls before execve.
SpawnedProcess spawn_process(const SpawnRequest& request);

}  // namespace cohort::launcher
