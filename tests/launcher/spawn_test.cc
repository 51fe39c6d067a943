#include "cohort/launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::spawn_test {
namespace {

int exec_error_code(const std::string& program, const std::string& path, std::string* message = nullptr) {
  try {
    resolve_program(program, path);
  } catch (const ExecError& e) {
    if (message) *message = e.what();
    return e.exit_code();
  }
  return 0;
}

void make_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, mode);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ::chmod(path.c_str(), mode);
}

std::string read_all(int fd) {
  // The fds are non-blocking: wait for EOF with poll-free retries.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(ResolveProgram, SearchesPathInOrder) {
  EXPECT_EQ(resolve_program("sh", "/nonexistent:/bin:/usr/bin"), "/bin/sh");
  EXPECT_EQ(resolve_program("/bin/sh", ""), "/bin/sh");
  testing::TempDir dir;
  make_file(dir.path() + "/tool", "#!/bin/sh\n", 0755);
  EXPECT_EQ(resolve_program("tool", "/bin:" + dir.path()), dir.path() + "/tool");
}

TEST(ResolveProgram, EmptyPathEntryIsTheCurrentDirectory) {
  testing::TempDir dir;
  make_file(dir.path() + "/local_tool", "#!/bin/sh\n", 0755);
  char previous[4096];
  ASSERT_NE(::getcwd(previous, sizeof previous), nullptr);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  const std::string found = resolve_program("local_tool", "/nonexistent::/bin");
  ASSERT_EQ(::chdir(previous), 0);
  EXPECT_EQ(found, "./local_tool");
}

TEST(ResolveProgram, ExplainsWhatIsWrong) {
  std::string message;
  EXPECT_EQ(exec_error_code("no_such_tool_xyz", "/bin:/usr/bin", &message), 127);
  EXPECT_EQ(message, "cannot execute 'no_such_tool_xyz': not found in PATH (/bin:/usr/bin)");
  EXPECT_EQ(exec_error_code("/nonexistent/tool", "/bin", &message), 127);
  EXPECT_EQ(message, "cannot execute '/nonexistent/tool': No such file or directory");

  testing::TempDir dir;
  EXPECT_EQ(exec_error_code(dir.path(), "", &message), 126);
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  make_file(dir.path() + "/plain", "data", 0644);
  EXPECT_EQ(exec_error_code(dir.path() + "/plain", "", &message), 126);
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  // Only a non-executable match in PATH: say so rather than "not found".
  EXPECT_EQ(exec_error_code("plain", "/nonexistent:" + dir.path(), &message), 126);
  EXPECT_NE(message.find(dir.path() + "/plain: Permission denied"), std::string::npos) << message;
  EXPECT_EQ(exec_error_code("", "/bin"), 127);
}

TEST(SpawnProcess, RunsWithTheEnvironmentAndPipes) {
  const SpawnedProcess p = spawn_process(
      {.path = "/bin/sh", .argv = {"sh", "-c", "echo \"$FOO\"; echo err >&2; exit 4"}, .envp = {"FOO=x y"}});
  EXPECT_EQ(read_all(p.stdout_fd), "x y\n");
  EXPECT_EQ(read_all(p.stderr_fd), "err\n");
  EXPECT_EQ(wait_exit(p.pid), 4);
}

TEST(SpawnProcess, LeadsItsOwnProcessGroup) {
  const SpawnedProcess p = spawn_process(
      {.path = "/bin/sh", .argv = {"sh", "-c", "read -r a b c d pgrp rest < /proc/$$/stat; echo $pgrp"}, .envp = {}});
  EXPECT_EQ(read_all(p.stdout_fd), std::to_string(p.pid) + "\n");
  ::close(p.stderr_fd);
  EXPECT_EQ(wait_exit(p.pid), 0);
}

TEST(SpawnProcess, StartsWithCleanSignalsAndDescriptors) {
  // Block and ignore signals here, as cohortrun does; the child must not inherit that.
  sigset_t block, previous_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &previous_mask), 0);
  struct sigaction ignore {}, previous_pipe {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous_pipe);
  const int stray = ::open("/dev/null", O_RDONLY);  // not close-on-exec

  const SpawnedProcess p = spawn_process({.path = "/bin/cat", .argv = {"cat", "/proc/self/status"}, .envp = {}});
  const SpawnedProcess fds = spawn_process({.path = "/bin/ls", .argv = {"ls", "/proc/self/fd"}, .envp = {}});

  ::close(stray);
  ::sigaction(SIGPIPE, &previous_pipe, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);

  const std::string status = read_all(p.stdout_fd);
  ::close(p.stderr_fd);
  EXPECT_EQ(wait_exit(p.pid), 0);
  EXPECT_NE(status.find("SigBlk:\t0000000000000000\n"), std::string::npos) << status;
  const size_t ign = status.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos);
  const unsigned long long ignored = std::stoull(status.substr(ign + 8, 16), nullptr, 16);
  EXPECT_EQ(ignored & (1ull << (SIGPIPE - 1)), 0u) << "SIGPIPE is still ignored";

  // ls lists 0, 1, 2 and the descriptor of the directory it reads, nothing else.
  const std::string listed = read_all(fds.stdout_fd);
  ::close(fds.stderr_fd);
  EXPECT_EQ(wait_exit(fds.pid), 0);
  EXPECT_EQ(testing::split_lines(listed).size(), 4u) << listed;
}

TEST(SpawnProcess, StdinIsDevNull) {
  const SpawnedProcess p = spawn_process({.path = "/bin/cat", .argv = {"cat"}, .envp = {}});
  EXPECT_EQ(read_all(p.stdout_fd), "");
  ::close(p.stderr_fd);
  EXPECT_EQ(wait_exit(p.pid), 0);
}

TEST(SpawnProcess, StdinPipeCarriesDataAndItsEnd) {
  const SpawnedProcess p = spawn_process(
      {.path = "/bin/sh", .argv = {"sh", "-c", "cat; echo end"}, .envp = {"PATH=/bin:/usr/bin"}, .stdin_pipe = true});
  ASSERT_GE(p.stdin_fd, 0);
  EXPECT_EQ(::fcntl(p.stdin_fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(::write(p.stdin_fd, "payload\n", 8), 8);
  ::close(p.stdin_fd);
  EXPECT_EQ(read_all(p.stdout_fd), "payload\nend\n");
  ::close(p.stderr_fd);
  EXPECT_EQ(wait_exit(p.pid), 0);
}

TEST(SpawnProcess, InheritedOutputIsOurs) {
  // The child's stdout is ours, here redirected to a pipe for the test.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(fds[1], STDOUT_FILENO);
  const SpawnedProcess p = spawn_process(
      {.path = "/bin/sh", .argv = {"sh", "-c", "echo direct"}, .envp = {}, .output = OutputMode::inherit});
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(fds[1]);
  EXPECT_EQ(p.stdout_fd, -1);
  EXPECT_EQ(p.stderr_fd, -1);
  EXPECT_EQ(p.stdin_fd, -1);
  EXPECT_EQ(wait_exit(p.pid), 0);
  EXPECT_EQ(read_all(fds[0]), "direct\n");
}

TEST(SpawnProcess, PtyGivesStdoutARawTerminalAndStderrAPipe) {
  const SpawnedProcess p = spawn_process(
      {.path = "/bin/sh",
       .argv = {"sh", "-c",
                "if test -t 1; then echo 'stdout: tty'; fi; if test -t 2; then echo 'stderr: tty' >&2; "
                "else echo 'stderr: pipe' >&2; fi; stty -a <&1; printf 'a\\nb\\n'"},
       .envp = {"PATH=/bin:/usr/bin"},
       .output = OutputMode::pty});
  if (p.output != OutputMode::pty) GTEST_SKIP() << p.output_note;
  const std::string out = read_all(p.stdout_fd);
  EXPECT_EQ(read_all(p.stderr_fd), "stderr: pipe\n");
  EXPECT_EQ(wait_exit(p.pid), 0);
  EXPECT_TRUE(out.starts_with("stdout: tty\n")) << out;
  EXPECT_TRUE(out.ends_with("\na\nb\n")) << "no \\r added: " << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  // Raw: no output processing (ONLCR), no echo; and a width to draw in.
  for (const char* flag : {"-opost", "-onlcr", "-echo "}) EXPECT_NE(out.find(flag), std::string::npos) << flag << out;
  EXPECT_EQ(out.find("columns 0;"), std::string::npos) << out;
}

TEST(SpawnProcess, PtyOutputWrittenJustBeforeExitArrivesWhole) {
  // More than a terminal buffers: the child blocks until it is read, exits
  // right after its last write, and reading ends with EIO, not lost bytes.
  const SpawnedProcess p = spawn_process({.path = "/bin/sh",
                                          .argv = {"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo end"},
                                          .envp = {"PATH=/bin:/usr/bin"},
                                          .output = OutputMode::pty});
  if (p.output != OutputMode::pty) GTEST_SKIP() << p.output_note;
  const std::string out = read_all(p.stdout_fd);
  ::close(p.stderr_fd);
  EXPECT_EQ(wait_exit(p.pid), 0);
  EXPECT_EQ(out, std::string(300000, 'x') + "end\n");
}

TEST(SpawnProcess, FailedExecIsReportedAndReaped) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/not_a_program";
  make_file(path, "this is text, not a program\n", 0755);
  try {
    spawn_process({.path = path, .argv = {"x"}, .envp = {}});
    FAIL() << "spawn_process did not throw";
  } catch (const ExecError& e) {
    EXPECT_EQ(e.exit_code(), 126);
    EXPECT_NE(std::string(e.what()).find("cannot execute '" + path + "': Exec format error"), std::string::npos)
        << e.what();
  }
  int status;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "the failed child was not reaped";
}

}  // namespace
}  // namespace cohort::launcher::spawn_test
