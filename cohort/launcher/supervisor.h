// Supervision of a job's ranks once they run: forwards their output, reaps
// them, forwards the launcher's signals and fails fast.
//
// Policy:
//  - A rank that exits non-zero or dies by a signal, while nothing else has
//    gone wrong, is the job's failure: every other rank's process group gets
//    SIGTERM, and SIGKILL `grace_s` later if it is still running.
//  - The first SIGINT, SIGTERM or SIGHUP the launcher receives is forwarded
//    to every rank's process group; ranks still running `signal_grace_s`
//    later get SIGKILL (they may take that long to shut down cleanly, and a
//    rank that ignores the signal cannot hold the job), and so do they at
//    once on the next such signal that arrives `signal_window_s` or more
//    after the first: copies of one signal that arrive together (`timeout`
//    signals cohortrun and then its whole process group; a terminal, a
//    batch system or a relay may do the same) are one request to stop, and
//    the ranks keep their grace period to save.
//  - With watch_start(), ranks that have not reported that they started by
//    the deadline stop the job like a failure (StopReason::start_timeout).
//  - With set_elastic(), a rank that fails is the elastic policy's to judge:
//    when it says the job goes on, the others keep running (see
//    elastic_controller.h); the policy may also end the job
//    (StopReason::elastic_ended).
//  - With watch_health(), a watch that finds a host or a rank gone (a
//    multi-host job's HostWatch, host_watch.h) stops the job like a failure
//    (StopReason::host_lost), before the ranks that wait for it time out.
//  - Once every rank has ended, output still buffered in the pipes is
//    forwarded; when a rank's descendants hold its pipes open after a failure
//    or a signal, its process group gets SIGKILL, and after `drain_s` the
//    pipes are closed regardless.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/launcher/exit_status.h"
#include "cohort/launcher/output_forwarder.h"
#include "cohort/launcher/signals.h"
#include "cohort/launcher/spawn.h"

namespace cohort::launcher {

struct SupervisorOptions {
  double grace_s = 3.0;       // SIGTERM to SIGKILL after a failure
  double signal_grace_s = 30.0;  // a forwarded signal to SIGKILL
  double signal_window_s = 0.5;  // signals this soon after the first are the same one
  double drain_s = 1.0;       // how long to wait for pipes after all ranks ended
  size_t tail_lines = 20;     // lines kept per rank for the report
  bool verbose = false;       // report each rank's end on stderr_fd
  int stdout_fd = 1;          // where ranks' stdout lines go
  int stderr_fd = 2;          // where ranks' stderr lines and messages go
};

enum class StopReason {
  none,           // every rank ended on its own
  rank_failed,    // a rank exited non-zero or died by a signal
  signal,         // the launcher received SIGINT, SIGTERM or SIGHUP
  launch_failed,  // stop() was called, e.g. a later rank could not be started
  start_timeout,  // ranks did not report that they started in time
  elastic_ended,  // the elastic policy ended the job (below --min-np too long)
  host_lost       // the health watch found a host (or a rank) gone silent
};

struct RankRecord {
  int rank = 0;
  int incarnation = 0;  // elastic: 0 for a slot's first process, then one more per replacement
  bool absorbed = false;  // elastic: it failed and the job went on without it
  std::string host;  // where it runs when not this machine (reports name it)
  pid_t pid = -1;
  bool ended = false;
  ExitStatus status;
  int signal_sent = 0;  // the last signal the launcher sent it, 0 if none
  bool killed_after_grace = false;  // still running when a grace period ended
  OutputTail tail;
};

struct SupervisionResult {
  std::vector<RankRecord> ranks;  // in the order they were added
  StopReason reason = StopReason::none;
  int failed_rank = -1;  // with rank_failed: the first rank that failed
  int signal = 0;        // with signal: the first signal the launcher received
  double grace_s = 0;    // the grace period that applied to the stop, if any
  std::string start_error;  // with start_timeout: which ranks were missing; with elastic_ended, host_lost: why
};

// An elastic job's policy (ElasticController through the launcher).
class ElasticPolicy {
 public:
  virtual ~ElasticPolicy() = default;
  // Rank `record` ended; for a failure, true when the job goes on without
  // it (the others keep running). `note` is said on stderr.
  virtual bool rank_ended(const RankRecord& record, std::string& note) = 0;
  // Called about every period() while ranks run; a non-empty result ends
  // the job with that message.
  virtual std::string tick() = 0;
  virtual std::chrono::milliseconds period() const = 0;
};

// Watches the running ranks from outside them (HostWatch: a multi-host
// job's heartbeats).
class HealthWatch {
 public:
  virtual ~HealthWatch() = default;
  // Called about every period() while ranks run and nothing has gone wrong,
  // with the ranks still running; a non-empty result ends the job with that
  // message (StopReason::host_lost).
  virtual std::string tick(const std::vector<int>& running) = 0;
  virtual std::chrono::milliseconds period() const = 0;
};

// Tells the supervisor whether every rank has started (remote ranks report
// it through the store, see StartWatch in start_watch.h).
class StartCheck {
 public:
  virtual ~StartCheck() = default;
  // True once every rank it watches has started; called every ~100 ms.
  virtual bool started() = 0;
  // Once the deadline has passed: which ranks are missing, in one line.
  virtual std::string describe_missing() = 0;
};

class Supervisor {
 public:
  // `signals` must have been created before any rank was spawned.
  Supervisor(SupervisorOptions options, SignalEvents& signals);
  // Kills (SIGKILL) and reaps ranks still running, e.g. after an exception.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Takes ownership of a spawned rank's pid and pipes (its stdin pipe, if
  // any, is closed once the rank has ended). `host` names a remote host.
  // May be called from an ElasticPolicy's rank_ended() while run() runs.
  void add(int rank, const SpawnedProcess& process, std::string host = {}, int incarnation = 0);

  // Failures go to `policy` first; it must outlive run().
  void set_elastic(ElasticPolicy& policy);

  // From now on, run() ticks `watch`; it must outlive run().
  void watch_health(HealthWatch& watch);

  // From now on, run() asks `check` whether every rank started until it says
  // so; still missing `timeout_s` after this call, the job is stopped with
  // StopReason::start_timeout. `check` must outlive run().
  void watch_start(StartCheck& check, double timeout_s);

  // SIGKILL to process `incarnation` of rank `rank`'s group, if it runs
  // (an elastic policy ending a silent process; its end is then reported
  // as any other). May be called from an ElasticPolicy's tick().
  void kill(int rank, int incarnation);

  // Stops the ranks added so far (SIGTERM, SIGKILL after the grace period);
  // run() then reports StopReason::launch_failed.
  void stop();

  // Runs until every rank has ended and its output is forwarded.
  SupervisionResult run();

 private:
  struct Rank;
  struct Stream;
  using Clock = std::chrono::steady_clock;

  void reap();
  void check_start(Clock::time_point now);
  void check_health(Clock::time_point now);
  void on_rank_end(Rank& rank, int wait_status);
  void on_launcher_signal(int signo);
  void signal_all(int signo);
  void stop_all(int signo, double grace_s);
  void signal_group(Rank& rank, int signo);
  void drain(Stream& stream, size_t budget);
  void close_stream(Stream& stream);
  void message(const std::string& text);
  int live_count() const;
  int open_stream_count() const;

  SupervisorOptions options_;
  SignalEvents& signals_;
  LiveLine live_line_;  // the terminal's bottom line, for ranks' redrawn lines
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::unique_ptr<Stream>> streams_;
  StopReason reason_ = StopReason::none;
  int failed_rank_ = -1;
  int received_signal_ = 0;
  Clock::time_point received_signal_at_;
  std::optional<Clock::time_point> kill_deadline_;
  double kill_grace_s_ = 0;  // the grace period kill_deadline_ ends
  StartCheck* start_check_ = nullptr;
  ElasticPolicy* elastic_ = nullptr;
  Clock::time_point next_elastic_tick_;
  HealthWatch* health_ = nullptr;
  Clock::time_point next_health_tick_;
  Clock::time_point start_deadline_;
  Clock::time_point next_start_check_;
  std::string start_error_;
};

}  // namespace cohort::launcher
