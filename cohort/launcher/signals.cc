#include "cohort/launcher/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort::launcher {

std::string signal_name(int signo) {
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) {
    if (signo == SIGRTMIN) return "SIGRTMIN";
    return "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  }
  // sigabbrev_np (glibc >= 2.32) gives the name without "SIG".
  if (const char* abbrev = sigabbrev_np(signo)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signo);
}

SignalEvents::SignalEvents() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  COHORT_CHECK(pthread_sigmask(SIG_BLOCK, &set, &previous_mask_) == 0) << "pthread_sigmask";
  fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  COHORT_CHECK(fd_ >= 0) << "signalfd: " << std::strerror(errno);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &previous_pipe_);
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks
  // itself, and their exit statuses would be lost.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGCHLD, &default_action, &previous_child_);
}

SignalEvents::~SignalEvents() {
  ::close(fd_);
  sigaction(SIGPIPE, &previous_pipe_, nullptr);
  sigaction(SIGCHLD, &previous_child_, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int SignalEvents::next() {
  signalfd_siginfo info;
  for (;;) {
    ssize_t n = ::read(fd_, &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return 0;  // EAGAIN: nothing pending
  }
}

}  // namespace cohort::launcher
