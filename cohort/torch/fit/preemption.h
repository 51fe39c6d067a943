// Preemption: a cluster (Slurm, a cloud, cohortrun forwarding Ctrl-C) asks a
// job to stop with SIGTERM or SIGINT. While a PreemptionWatch lives, the
// first such signal only raises a flag, which fit() turns into an agreed
// stop at one step boundary on every rank (model.h's vote); the previous
// signal dispositions are put back at that moment, so a second signal acts
// as it would have without the watch (stops the process).
#pragma once

namespace cohort {

class PreemptionWatch {
 public:
  // Installs the handlers (and clears the flag) when `enabled`.
  explicit PreemptionWatch(bool enabled = true);
  ~PreemptionWatch();  // restores the previous handlers
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  // A signal (or request()) arrived since the watch was installed.
  static bool requested();
  // Raises the flag as a signal would (tests, programs that decide to stop).
  static void request();
  // The signal that raised the flag, 0 for request() or none.
  static int signal_number();

 private:
  bool installed_ = false;
};

}  // namespace cohort
