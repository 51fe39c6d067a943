// StallInspector: notices ops that some ranks have submitted and others have
// not, for longer than the warning time (COHORT_STALL_WARNING_S, default
// 60 s), and reports which ranks are missing which ops; past the shutdown
// time (COHORT_STALL_SHUTDOWN_S, by default COHORT_TIMEOUT_S: 300 s) it says
// that the engine must fail, which fails every rank's pending ops with a
// TimeoutError carrying the report. With the defaults a stalled job is
// warned about first and ends five minutes after the stall began, instead
// of waiting forever (a rank of another job in the seat, a rank that runs
// other ops or fewer steps).
//
// Runs on rank 0 of the engine, which sees every rank's submissions in the
// cycle records (the Negotiator lists them). It is fed by observation passes
// (begin, observe each waiting op, end); an op absent from a pass is no
// longer waiting and is forgotten. Time is measured from the first pass that
// saw the op waiting, so passes must be frequent compared with the warning
// time (the engine runs one every warning/20, at most 1 s, and before its
// thread sleeps).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::engine {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  StallInspector(double warning_s, double shutdown_s);

  bool enabled() const { return warning_ > Clock::duration::zero() || shutdown_ > Clock::duration::zero(); }
  // How often the engine should run an observation pass.
  Clock::duration pass_interval() const;

  void begin(Clock::time_point now);
  void observe(const std::string& what, const std::vector<bool>& present);
  void end();

  struct Findings {
    std::string warning;   // to log (empty: nothing new to report)
    std::string shutdown;  // non-empty: fail every rank with this
  };
  // What is due at `now`. An op is reported again every warning period
  // while it stays stalled.
  Findings check(Clock::time_point now);

  // When check() could next find something; nullopt when nothing waits.
  std::optional<Clock::time_point> next_deadline() const;

  size_t waiting() const { return ops_.size(); }

 private:
  struct Op {
    std::vector<bool> present;
    Clock::time_point since;
    Clock::time_point next_warning;
    bool seen = false;
  };
  static std::string describe(const std::string& what, const Op& op, Clock::time_point now);

  Clock::duration warning_, shutdown_;
  Clock::time_point now_{};
  std::map<std::string, Op> ops_;
};

}  // namespace cohort::engine
