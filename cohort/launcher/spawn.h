// Starting one rank: find the program, fork and exec it with its stdout on a
// pseudo-terminal (or a pipe) and its stderr on a pipe, which the launcher
// reads.
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

// Where the child's stdout and stderr go.
enum class OutputMode {
  // stdout on a pseudo-terminal, stderr on a pipe, both read by the caller.
  // The child's stdio sees a terminal on stdout, so it writes each line as it
  // ends (a pipe would hold output in 4 KiB blocks) and progress bars draw;
  // stderr is unbuffered by stdio anyway, and stays apart from stdout. The
  // terminal is raw (no "\n" -> "\r\n", no echo) and is not the child's
  // controlling terminal. As OpenMPI's mpirun does.
  pty,
  pipe,     // stdout and stderr on pipes read by the caller
  inherit,  // this process's stdout and stderr (the remote end of a rank, whose launcher reads them)
};
const char* output_mode_name(OutputMode mode);  // "pty", "pipe", "inherit"

struct SpawnRequest {
  std::string path;               // from resolve_program
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> envp;  // "K=V"
  OutputMode output = OutputMode::pipe;
  // true: the child's stdin is a pipe whose write end is returned (a remote
  // rank's launch command reads its payload there); false: /dev/null.
  bool stdin_pipe = false;
};

struct SpawnedProcess {
  pid_t pid = -1;
  // Read ends, non-blocking, close-on-exec; the caller closes them (-1 with
  // OutputMode::inherit). With a pseudo-terminal, stdout_fd is its master:
  // once every holder of the terminal has closed it and its output is read,
  // read() fails with EIO where a pipe would return 0.
  int stdout_fd = -1;
  int stderr_fd = -1;
  int stdin_fd = -1;   // with stdin_pipe: the write end, blocking, close-on-exec
  // The mode set up: pipe where a pseudo-terminal was asked for but none
  // could be had (then output_note says why).
  OutputMode output = OutputMode::pipe;
  std::string output_note;
};

// Whether `pid`, a child of this process, has not ended yet. It is not
// reaped: whoever waits for it still sees it end.
bool process_running(pid_t pid);

// Forks and execs `request`. The child runs in its own process group (its
// pgid is its pid, so the launcher can signal it and what it spawns, and a
// Ctrl-C in the terminal reaches only the launcher, which forwards it), gets
// SIGKILL when the launcher dies (PR_SET_PDEATHSIG; only the calling thread
// must stay alive, so call this from the main thread), reads stdin from
// /dev/null (or the stdin pipe), writes stdout and stderr as request.output
// says (pipes when no pseudo-terminal can be had: no /dev/ptmx, or the
// system's limit reached), inherits no other file descriptor, and starts
// with an empty signal mask and SIGPIPE at its default. Returns once the
// exec succeeded; when it failed, reaps the child and throws ExecError with
// the reason. Safe in a multithreaded process:
// the child only makes async-signal-safe calls before execve.
SpawnedProcess spawn_process(const SpawnRequest& request);

}  // namespace cohort::launcher
