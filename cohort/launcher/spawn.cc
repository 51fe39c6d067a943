#include "cohort/launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "cohort/common/check.h"

namespace cohort::launcher {
namespace {

// Closes a file descriptor when it goes out of scope unless released.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  COHORT_CHECK(::pipe2(fds, O_CLOEXEC) == 0) << "pipe2: " << std::strerror(errno);
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}

// Columns kept free for the launcher's "[rank] " prefix ("[12345] ").
constexpr int kPrefixColumns = 8;

// A pseudo-terminal for the child's stdout: `master` stays here, `slave`
// becomes the child's fd 1. Raw, so that the bytes the child writes are the
// bytes read here ("\n" not turned into "\r\n", nothing echoed), and as
// wide as this process's terminal (less the prefix), or 80 columns. Returns
// why it failed, or empty.
std::string open_terminal(Fd& master, Fd& slave) {
  master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (master.get() < 0) return std::string("posix_openpt: ") + std::strerror(errno);
  if (::grantpt(master.get()) != 0) return std::string("grantpt: ") + std::strerror(errno);
  if (::unlockpt(master.get()) != 0) return std::string("unlockpt: ") + std::strerror(errno);
  // TIOCGPTPEER opens the peer of this very master, even when /dev/pts is
  // another mount than the one ptsname() names; older kernels lack it.
  slave.reset(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (slave.get() < 0) {
    char name[128];
    if (::ptsname_r(master.get(), name, sizeof name) != 0) return std::string("ptsname: ") + std::strerror(errno);
    slave.reset(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (slave.get() < 0) return std::string("open ") + name + ": " + std::strerror(errno);
  }
  termios mode{};
  if (::tcgetattr(slave.get(), &mode) != 0) return std::string("tcgetattr: ") + std::strerror(errno);
  ::cfmakeraw(&mode);
  mode.c_oflag &= ~ONLCR;  // moot without OPOST, but says what matters here
  if (::tcsetattr(slave.get(), TCSANOW, &mode) != 0) return std::string("tcsetattr: ") + std::strerror(errno);
  winsize size{.ws_row = 24, .ws_col = 80, .ws_xpixel = 0, .ws_ypixel = 0};
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    winsize ours{};
    if (::ioctl(fd, TIOCGWINSZ, &ours) == 0 && ours.ws_col > 0) {
      // Room for the "[rank] " prefix the launcher adds, so that a line
      // drawn to the full width still fits on one row.
      size = ours;
      size.ws_col = static_cast<unsigned short>(std::max(20, ours.ws_col - kPrefixColumns));
      break;
    }
  }
  ::ioctl(slave.get(), TIOCSWINSZ, &size);
  return {};
}

// Why `path` cannot be run, or empty when it can.
std::string unusable_reason(const std::string& path, int& exit_code) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    exit_code = 127;
    return std::strerror(errno);
  }
  exit_code = 126;
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (::access(path.c_str(), X_OK) != 0) return std::strerror(errno);
  return {};
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

const char* output_mode_name(OutputMode mode) {
  switch (mode) {
    case OutputMode::pty: return "pty";
    case OutputMode::pipe: return "pipe";
    case OutputMode::inherit: return "inherit";
  }
  return "?";
}

std::string resolve_program(const std::string& program, const std::string& path_variable) {
  if (program.empty()) throw ExecError("cannot execute '': empty program name", 127);
  int exit_code = 127;
  if (program.find('/') != std::string::npos) {
    const std::string why = unusable_reason(program, exit_code);
    if (!why.empty()) throw ExecError("cannot execute '" + program + "': " + why, exit_code);
    return program;
  }
  const std::string search = path_variable.empty() ? "/bin:/usr/bin" : path_variable;
  std::string first_problem;
  int first_problem_code = 127;
  size_t start = 0;
  for (;;) {
    const size_t colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    const std::string why = unusable_reason(candidate, exit_code);
    if (why.empty()) return candidate;
    // A match that exists but cannot be run is worth naming if nothing else fits.
    if (exit_code == 126 && first_problem.empty()) {
      first_problem = candidate + ": " + why;
      first_problem_code = 126;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!first_problem.empty())
    throw ExecError("cannot execute '" + program + "': " + first_problem, first_problem_code);
  throw ExecError("cannot execute '" + program + "': not found in PATH (" + search + ")", 127);
}

SpawnedProcess spawn_process(const SpawnRequest& request) {
  COHORT_CHECK(!request.argv.empty()) << "spawn_process needs argv[0]";
  Fd out_read, out_write, err_read, err_write, status_read, status_write, in_read, in_write;
  OutputMode output = request.output;
  std::string output_note;
  if (output == OutputMode::pty) {
    output_note = open_terminal(out_read, out_write);
    if (!output_note.empty()) {
      output = OutputMode::pipe;
      output_note = "no pseudo-terminal for the rank's output (" + output_note + "); using a pipe";
    }
  }
  if (output == OutputMode::pipe) make_pipe(out_read, out_write);
  if (output != OutputMode::inherit) make_pipe(err_read, err_write);
  // Carries errno from a failed execve; close-on-exec, so EOF means success.
  make_pipe(status_read, status_write);
  Fd dev_null;
  if (request.stdin_pipe) {
    make_pipe(in_read, in_write);
  } else {
    dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    COHORT_CHECK(dev_null.get() >= 0) << "open /dev/null: " << std::strerror(errno);
  }
  const int child_stdin = request.stdin_pipe ? in_read.get() : dev_null.get();

  // Everything the child needs is prepared here: after fork() in a
  // multithreaded process only async-signal-safe calls are allowed.
  std::vector<char*> argv = c_strings(request.argv);
  std::vector<char*> envp = c_strings(request.envp);
  const pid_t parent = ::getpid();
  const long max_fd = ::sysconf(_SC_OPEN_MAX);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);

  const pid_t pid = ::fork();
  COHORT_CHECK(pid >= 0) << "fork: " << std::strerror(errno);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died before prctl took effect.
    if (::getppid() != parent) ::_exit(127);
    ::dup2(child_stdin, STDIN_FILENO);
    if (out_write.get() >= 0) {
      ::dup2(out_write.get(), STDOUT_FILENO);
      ::dup2(err_write.get(), STDERR_FILENO);
    }
    // Whatever else is open (the store's sockets, pipes of other ranks, fds
    // the launcher inherited) must not leak into the rank.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    ::sigaction(SIGPIPE, &default_action, nullptr);
    ::sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
    ::execve(request.path.c_str(), argv.data(), envp.data());
    const int error = errno;
    [[maybe_unused]] ssize_t n = ::write(status_write.get(), &error, sizeof error);
    ::_exit(127);
  }

  // Also set in the parent so that signalling the group cannot race the child.
  ::setpgid(pid, pid);
  out_write.reset();
  err_write.reset();
  status_write.reset();
  dev_null.reset();
  in_read.reset();

  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(status_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const int code = (child_errno == ENOENT || child_errno == ENOTDIR) ? 127 : 126;
    throw ExecError("cannot execute '" + request.path + "': " + std::strerror(child_errno), code);
  }

  for (int fd : {out_read.get(), err_read.get()})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return SpawnedProcess{.pid = pid,
                        .stdout_fd = out_read.release(),
                        .stderr_fd = err_read.release(),
                        .stdin_fd = in_write.release(),
                        .output = output,
                        .output_note = std::move(output_note)};
}

bool process_running(pid_t pid) {
  siginfo_t info{};
  // WNOWAIT leaves an ended child waitable; si_pid stays 0 while it runs.
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

}  // namespace cohort::launcher
