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
  // false: the child writes to this process's stdout and stderr instead of
  // pipes (the remote end of a rank, which its launcher already reads).
  bool capture_output = true;
  // true: the child's stdin is a pipe whose write end is returned (a remote
  // rank's launch command reads its payload there); false: /dev/null.
  bool stdin_pipe = false;
};

struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends: non-blocking, close-on-exec; the caller closes them
  int stderr_fd = -1;  // (-1 without capture_output)
  int stdin_fd = -1;   // with stdin_pipe: the write end, blocking, close-on-exec
};

// Forks and execs `request`. The child runs in its own process group (its
// pgid is its pid, so the launcher can signal it and what it spawns, and a
// Ctrl-C in the terminal reaches only the launcher, which forwards it), gets
// SIGKILL when the launcher dies (PR_SET_PDEATHSIG; only the calling thread
// must stay alive, so call this from the main thread), reads stdin from
// /dev/null (or the stdin pipe), writes stdout and stderr to the pipes
// (unless capture_output is false), inherits no other file
// descriptor, and starts with an empty signal mask and SIGPIPE at its
// default. Returns once the exec succeeded; when it failed, reaps the child
// and throws ExecError with the reason. Safe in a multithreaded process:
// the child only makes async-signal-safe calls before execve.
SpawnedProcess spawn_process(const SpawnRequest& request);

}  // namespace cohort::launcher
