// Signal plumbing for cohortrun: names of signals for reports, and a guard
// that turns the signals the launcher reacts to into readable events.
#pragma once

#include <signal.h>

#include <string>

namespace cohort::launcher {

// "SIGKILL" for 9, "SIGRTMIN+3" for real-time signals, "signal 99" for
// anything unknown.
std::string signal_name(int signo);

// While alive, SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked in the
// calling thread and delivered through fd() (a non-blocking signalfd), and
// SIGPIPE is ignored (a closed stdout must not kill the launcher while ranks
// still run) and SIGCHLD is at its default (so exit statuses can be waited
// for). Threads created afterwards inherit the blocked mask, so create
// the guard before starting any thread (the store server), or a forwarded
// Ctrl-C could land in a thread where it terminates the process. The
// destructor restores the previous mask and dispositions.
class SignalEvents {
 public:
  SignalEvents();
  ~SignalEvents();
  SignalEvents(const SignalEvents&) = delete;
  SignalEvents& operator=(const SignalEvents&) = delete;

  int fd() const { return fd_; }
  // The next pending signal number, or 0 when none is pending.
  int next();

 private:
  int fd_ = -1;
  sigset_t previous_mask_;
  struct sigaction previous_pipe_ {};
  struct sigaction previous_child_ {};
};

}  // namespace cohort::launcher
