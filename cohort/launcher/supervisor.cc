#include "cohort/launcher/supervisor.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/seconds.h"

namespace cohort::launcher {

struct Supervisor::Rank {
  RankRecord record;
  int stdin_fd = -1;
};

struct Supervisor::Stream {
  Rank* rank = nullptr;
  int fd = -1;
  OutputForwarder forwarder;
};

Supervisor::Supervisor(SupervisorOptions options, SignalEvents& signals)
    : options_(options), signals_(signals) {}

Supervisor::~Supervisor() {
  for (auto& rank : ranks_) {
    if (rank->record.ended) continue;
    signal_group(*rank, SIGKILL);
    int status = 0;
    while (::waitpid(rank->record.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (auto& stream : streams_)
    if (stream->fd >= 0) ::close(stream->fd);
  for (auto& rank : ranks_)
    if (rank->stdin_fd >= 0) ::close(rank->stdin_fd);
}

void Supervisor::add(int rank_id, const SpawnedProcess& process, std::string host, int incarnation) {
  auto rank = std::make_unique<Rank>();
  rank->record.rank = rank_id;
  rank->record.incarnation = incarnation;
  rank->record.host = std::move(host);
  rank->record.pid = process.pid;
  rank->stdin_fd = process.stdin_fd;
  rank->record.tail = OutputTail(options_.tail_lines);
  Rank* r = rank.get();
  ranks_.push_back(std::move(rank));
  for (const auto& [from, to] : {std::pair{process.stdout_fd, options_.stdout_fd}, std::pair{process.stderr_fd, options_.stderr_fd}})
    streams_.push_back(std::make_unique<Stream>(Stream{
        r, from,
        OutputForwarder({.rank = rank_id, .out_fd = to, .live = ::isatty(to) ? &live_line_ : nullptr},
                        &r->record.tail)}));
}

void Supervisor::set_elastic(ElasticPolicy& policy) {
  elastic_ = &policy;
  next_elastic_tick_ = Clock::now();
}

void Supervisor::watch_health(HealthWatch& watch) {
  health_ = &watch;
  next_health_tick_ = Clock::now();
}

void Supervisor::check_health(Clock::time_point now) {
  if (!health_ || reason_ != StopReason::none || now < next_health_tick_) return;
  next_health_tick_ = now + health_->period();
  std::vector<int> running;
  for (const auto& rank : ranks_)
    if (!rank->record.ended) running.push_back(rank->record.rank);
  std::string why = health_->tick(running);
  if (why.empty()) return;
  reason_ = StopReason::host_lost;
  start_error_ = std::move(why);
  message("error: " + start_error_ + "; stopping the job");
  stop_all(SIGTERM, options_.grace_s);
}

void Supervisor::watch_start(StartCheck& check, double timeout_s) {
  start_check_ = &check;
  start_deadline_ = Clock::now() + steady_seconds(timeout_s);
  next_start_check_ = Clock::now();
}

void Supervisor::check_start(Clock::time_point now) {
  if (!start_check_ || now < next_start_check_) return;
  if (reason_ != StopReason::none || start_check_->started()) {
    start_check_ = nullptr;  // started, or the job is stopping anyway
    return;
  }
  next_start_check_ = now + std::chrono::milliseconds(100);
  if (now < start_deadline_) return;
  reason_ = StopReason::start_timeout;
  start_error_ = start_check_->describe_missing();
  start_check_ = nullptr;
  message("error: " + start_error_ + "; stopping the job");
  stop_all(SIGTERM, options_.grace_s);
}

void Supervisor::stop() {
  if (reason_ != StopReason::none) return;
  reason_ = StopReason::launch_failed;
  stop_all(SIGTERM, options_.grace_s);
}

int Supervisor::live_count() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](const auto& r) { return !r->record.ended; }));
}

int Supervisor::open_stream_count() const {
  return static_cast<int>(std::count_if(streams_.begin(), streams_.end(), [](const auto& s) { return s->fd >= 0; }));
}

void Supervisor::message(const std::string& text) {
  const std::string line = "cohortrun: " + text + "\n";
  if (::isatty(options_.stderr_fd)) live_line_.write_lines(options_.stderr_fd, line, nullptr);
  else write_fully(options_.stderr_fd, line);
}

void Supervisor::signal_group(Rank& rank, int signo) {
  // The rank leads its own process group, so this also reaches what it
  // started (a shell wrapper's child, for example).
  // Once a rank is reaped its pid may be reused, so only its group (which
  // keeps the number while members remain) is signalled then.
  if (::kill(-rank.record.pid, signo) != 0 && errno == ESRCH && !rank.record.ended)
    ::kill(rank.record.pid, signo);
}

void Supervisor::signal_all(int signo) {
  for (auto& rank : ranks_) {
    if (rank->record.ended) continue;
    signal_group(*rank, signo);
    rank->record.signal_sent = signo;
  }
}

void Supervisor::kill(int rank, int incarnation) {
  for (auto& r : ranks_)
    if (r->record.rank == rank && r->record.incarnation == incarnation && !r->record.ended) {
      signal_group(*r, SIGKILL);
      r->record.signal_sent = SIGKILL;
    }
}

// `signo` now, SIGKILL `grace_s` later to the ranks still running then.
void Supervisor::stop_all(int signo, double grace_s) {
  signal_all(signo);
  kill_deadline_ = Clock::now() + steady_seconds(grace_s);
  kill_grace_s_ = grace_s;
}

void Supervisor::reap() {
  // By index: an elastic policy adds replacements from on_rank_end().
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = *ranks_[i];
    if (rank.record.ended) continue;
    int status = 0;
    const pid_t pid = ::waitpid(rank.record.pid, &status, WNOHANG);
    if (pid == rank.record.pid) on_rank_end(rank, status);
  }
}

void Supervisor::on_rank_end(Rank& rank, int wait_status) {
  rank.record.ended = true;
  if (rank.stdin_fd >= 0) {
    ::close(rank.stdin_fd);
    rank.stdin_fd = -1;
  }
  rank.record.status = ExitStatus{wait_status};
  if (options_.verbose)
    message("rank " + std::to_string(rank.record.rank) + " (pid " + std::to_string(rank.record.pid) +
            ") " + describe(rank.record.status));
  if (elastic_ && reason_ == StopReason::none) {
    std::string note;
    const bool goes_on = elastic_->rank_ended(rank.record, note);
    if (!rank.record.status.success()) {
      rank.record.absorbed = goes_on;
      message("rank " + std::to_string(rank.record.rank) + "." + std::to_string(rank.record.incarnation) + " (pid " +
              std::to_string(rank.record.pid) + ") " + describe(rank.record.status) +
              (note.empty() ? "" : "; " + note) + (goes_on ? "" : "; the job cannot go on"));
      if (goes_on) return;
    }
  }
  if (rank.record.status.success() || reason_ != StopReason::none) return;
  reason_ = StopReason::rank_failed;
  failed_rank_ = rank.record.rank;
  const int others = live_count();
  if (others > 0) {
    if (options_.verbose)
      message("rank " + std::to_string(rank.record.rank) + " failed; stopping the other " +
              std::to_string(others) + " rank(s)");
    stop_all(SIGTERM, options_.grace_s);
  }
}

void Supervisor::on_launcher_signal(int signo) {
  const int live = live_count();
  const auto now = Clock::now();
  if (reason_ == StopReason::none) {
    reason_ = StopReason::signal;
    received_signal_ = signo;
    received_signal_at_ = now;
    if (live > 0) {
      message("got " + signal_name(signo) + "; forwarding it to " + std::to_string(live) +
              " rank(s) (they are killed if still running in " + seconds_text(options_.signal_grace_s) +
              " s, or when it is sent again)");
      stop_all(signo, options_.signal_grace_s);
    }
    return;
  }
  if (reason_ == StopReason::signal && now - received_signal_at_ < steady_seconds(options_.signal_window_s)) {
    if (options_.verbose)
      message("got " + signal_name(signo) + " again within " + seconds_text(options_.signal_window_s) +
              " s: the same request to stop (the ranks keep their grace period)");
    return;
  }
  if (live > 0) {
    message("got " + signal_name(signo) + (reason_ == StopReason::signal ? " again" : " while stopping") +
            "; killing " + std::to_string(live) + " rank(s)");
    signal_all(SIGKILL);
  }
  kill_deadline_.reset();
}

void Supervisor::close_stream(Stream& stream) {
  stream.forwarder.finish();
  ::close(stream.fd);
  stream.fd = -1;
}

void Supervisor::drain(Stream& stream, size_t budget) {
  if (!read_available(stream.fd, budget, [&](std::string_view bytes) { stream.forwarder.feed(bytes); }))
    close_stream(stream);
}

SupervisionResult Supervisor::run() {
  // Bounds the bytes read from one stream per wake-up so that a chatty rank
  // cannot starve the others or the signal handling.
  constexpr size_t kReadBudget = 1 << 20;
  std::optional<Clock::time_point> drain_deadline;
  std::vector<pollfd> fds;
  std::vector<Stream*> polled;

  for (;;) {
    reap();
    const auto now = Clock::now();
    const int live = live_count();
    if (live == 0) {
      if (open_stream_count() == 0) break;
      if (!drain_deadline) {
        drain_deadline = now + steady_seconds(options_.drain_s);
        // Descendants of failed or stopped ranks keep their pipes open and
        // would outlive the job: stop them too.
        if (reason_ != StopReason::none)
          for (auto& stream : streams_)
            if (stream->fd >= 0) signal_group(*stream->rank, SIGKILL);
      } else if (now >= *drain_deadline) {
        for (auto& stream : streams_)
          if (stream->fd >= 0) {
            drain(*stream, kReadBudget);
            if (stream->fd >= 0) close_stream(*stream);
          }
        break;
      }
    }
    if (live > 0) check_start(now);
    if (live > 0) check_health(now);
    if (live > 0 && elastic_ && reason_ == StopReason::none && now >= next_elastic_tick_) {
      next_elastic_tick_ = now + elastic_->period();
      if (std::string why = elastic_->tick(); !why.empty()) {
        reason_ = StopReason::elastic_ended;
        start_error_ = why;
        message("error: " + why + "; stopping the job");
        stop_all(SIGTERM, options_.grace_s);
      }
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      if (live > 0) {
        // Said even without --verbose after a forwarded signal: the user
        // asked the ranks to stop, and some did not.
        if (options_.verbose || reason_ == StopReason::signal)
          message("grace period of " + seconds_text(kill_grace_s_) + " s over; killing " + std::to_string(live) +
                  " rank(s)");
        for (auto& rank : ranks_)
          if (!rank->record.ended) rank->record.killed_after_grace = true;
        signal_all(SIGKILL);
      }
      kill_deadline_.reset();
    }

    std::optional<Clock::time_point> wake;
    if (live > 0) wake = kill_deadline_;
    else wake = drain_deadline;
    if (live > 0 && start_check_ && (!wake || next_start_check_ < *wake)) wake = next_start_check_;
    if (live > 0 && elastic_ && reason_ == StopReason::none && (!wake || next_elastic_tick_ < *wake))
      wake = next_elastic_tick_;
    if (live > 0 && health_ && reason_ == StopReason::none && (!wake || next_health_tick_ < *wake))
      wake = next_health_tick_;
    int timeout_ms = -1;
    if (wake) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
    }

    fds.clear();
    polled.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    for (auto& stream : streams_)
      if (stream->fd >= 0) {
        fds.push_back({stream->fd, POLLIN, 0});
        polled.push_back(stream.get());
      }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      COHORT_CHECK(errno == EINTR) << "poll: " << std::strerror(errno);
      continue;
    }
    for (size_t i = 0; i < polled.size(); ++i)
      if (fds[i + 1].revents) drain(*polled[i], kReadBudget);
    if (fds[0].revents & POLLIN)
      while (const int signo = signals_.next()) {
        if (signo == SIGCHLD) continue;
        // A rank may have ended since the top of this loop (its SIGCHLD can
        // arrive with this signal): reap first, so that what is said and
        // done counts only the ranks still running.
        reap();
        on_launcher_signal(signo);
      }
  }

  SupervisionResult result;
  result.reason = reason_;
  result.failed_rank = failed_rank_;
  result.signal = received_signal_;
  result.grace_s = kill_grace_s_;
  result.start_error = start_error_;
  for (const auto& rank : ranks_) result.ranks.push_back(rank->record);
  return result;
}

}  // namespace cohort::launcher
