#include "cohort/torch/fit/preemption.h"

#include <signal.h>

#include <atomic>

#include "cohort/common/check.h"

namespace cohort {
namespace {

std::atomic<int> g_requested{0};  // 0 none, -1 request(), else the signal number
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

constexpr int kSignals[] = {SIGTERM, SIGINT};
struct sigaction g_previous[2];
std::atomic<bool> g_installed{false};

void restore_previous() {
  if (!g_installed.exchange(false)) return;
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

extern "C" void on_signal(int signo) {
  g_requested.store(signo);
  // Async-signal-safe: sigaction is. The next signal finds the old
  // disposition.
  restore_previous();
}

}  // namespace

PreemptionWatch::PreemptionWatch(bool enabled) {
  if (!enabled) return;
  COHORT_CHECK(!g_installed.load()) << "a PreemptionWatch is active already (fit() inside fit()?)";
  g_requested.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i) COHORT_CHECK(::sigaction(kSignals[i], &action, &g_previous[i]) == 0);
  g_installed.store(true);
  installed_ = true;
}

PreemptionWatch::~PreemptionWatch() {
  if (installed_) restore_previous();
}

bool PreemptionWatch::requested() { return g_requested.load() != 0; }

void PreemptionWatch::request() { g_requested.store(-1); }

int PreemptionWatch::signal_number() { return g_requested.load() > 0 ? g_requested.load() : 0; }

}  // namespace cohort
