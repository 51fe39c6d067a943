#include "cohort/torch/fit/step_telemetry.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "cohort/common/tunables.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace {

// A process's row in the epoch merge: steps, rows, then these sums of
// nanoseconds, as doubles.
constexpr uint64_t telemetry::StepTotals::*kTimeColumns[] = {
    &telemetry::StepTotals::step_ns,     &telemetry::StepTotals::compute_ns, &telemetry::StepTotals::peer_wait_ns,
    &telemetry::StepTotals::transfer_ns, &telemetry::StepTotals::input_ns,   &telemetry::StepTotals::checkpoint_ns};
constexpr int64_t kColumns = 2 + std::size(kTimeColumns);

uint64_t ns(StepTelemetry::Clock::duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
}

uint64_t blocked_ns(const engine::BlockedTime& from, const engine::BlockedTime& to) {
  return (to.peer_wait_ns - from.peer_wait_ns) + (to.transfer_ns - from.transfer_ns);
}

uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

thread_local uint64_t checkpoint_ns = 0;

}  // namespace

CheckpointTimer::CheckpointTimer()
    : start_(std::chrono::steady_clock::now()), blocked_(engine::this_thread_blocked_time()) {}

CheckpointTimer::~CheckpointTimer() {
  checkpoint_ns +=
      minus(ns(std::chrono::steady_clock::now() - start_), blocked_ns(blocked_, engine::this_thread_blocked_time()));
}

uint64_t this_thread_checkpoint_ns() { return checkpoint_ns; }

StepTelemetry::StepTelemetry(int processes, bool chief)
    : processes_(processes), enabled_(tunables::telemetry()), chief_(chief), checkpoint_seen_(checkpoint_ns) {
  if (!initialized()) return;
  rank_ = cohort::rank();
  // Per-process rows only where the strategy's processes are the world's
  // ranks (multi_worker, zero, ...): its merge sums one row per rank.
  if (processes_ != cohort::size()) processes_ = 1;
  store_ = world_store();
  if (!enabled_) return;
  publisher_ = std::make_unique<telemetry::Publisher>(
      store_, accounting_,
      telemetry::PublisherOptions{
          .rank = rank_,
          .size = cohort::size(),
          .membership_epoch = membership_epoch(),
          .period = std::chrono::milliseconds(std::max<int64_t>(10, tunables::telemetry_interval_ms())),
          .watch_stragglers = rank_ == 0,
          .straggler = {.threshold = tunables::straggler_threshold(), .hold_s = tunables::straggler_hold_s()}});
}

StepTelemetry::~StepTelemetry() = default;

void StepTelemetry::step_ends(int64_t rows, int64_t epoch, int64_t step) {
  if (!enabled_) return;
  const Clock::time_point end = Clock::now();
  const engine::BlockedTime blocked_end = engine::this_thread_blocked_time();
  const uint64_t checkpoint_end = this_thread_checkpoint_ns();
  const uint64_t between_steps = checkpoint_begin_ - checkpoint_seen_;
  checkpoint_seen_ = checkpoint_end;
  accounting_.add(
      {.rows = rows,
       .step_ns = ns(end - begin_) + between_steps,
       .compute_ns = minus(ns(compute_end_ - compute_begin_), blocked_ns(blocked_compute_begin_, blocked_compute_)),
       .peer_wait_ns = blocked_end.peer_wait_ns - blocked_begin_.peer_wait_ns,
       .transfer_ns = blocked_end.transfer_ns - blocked_begin_.transfer_ns,
       .input_ns = minus(ns(input_end_ - begin_), blocked_ns(blocked_begin_, blocked_input_)),
       .checkpoint_ns = checkpoint_end - checkpoint_begin_ + between_steps},
      epoch, step);
}

at::Tensor StepTelemetry::epoch_rows() const {
  at::Tensor rows = at::zeros({processes_ > 1 ? processes_ : 0, kColumns}, at::kDouble);
  if (processes_ <= 1) return rows.flatten();
  const telemetry::StepTotals t = accounting_.epoch();
  double* row = rows[rank_].data_ptr<double>();
  row[0] = static_cast<double>(t.steps);
  row[1] = static_cast<double>(t.rows);
  for (size_t c = 0; c < std::size(kTimeColumns); ++c) row[2 + c] = static_cast<double>(t.*kTimeColumns[c]);
  return rows.flatten();
}

void StepTelemetry::finish_epoch(const at::Tensor& merged_rows, Logs& logs) {
  epoch_ranks_.clear();
  if (!enabled_) return;
  const telemetry::StepTotals mine = accounting_.epoch();
  accounting_.reset_epoch();
  if (processes_ <= 1 && mine.steps == 0) return;
  const at::Tensor rows = processes_ > 1 ? merged_rows.reshape({processes_, kColumns}).contiguous() : at::Tensor();
  const int n = processes_ > 1 ? processes_ : 1;
  for (int r = 0; r < n; ++r) {
    telemetry::StepTotals t = mine;
    if (processes_ > 1) {
      const double* v = rows[r].data_ptr<double>();
      t = {};
      t.steps = static_cast<int64_t>(v[0]);
      t.rows = static_cast<int64_t>(v[1]);
      for (size_t c = 0; c < std::size(kTimeColumns); ++c) t.*kTimeColumns[c] = static_cast<uint64_t>(v[2 + c]);
    }
    telemetry::RankSample s{
        .rank = processes_ > 1 ? r : rank_, .size = n, .membership_epoch = initialized() ? membership_epoch() : -1};
    telemetry::set_means(s, t);
    if (s.rank == rank_) s.pid = static_cast<int64_t>(getpid());
    epoch_ranks_.push_back(std::move(s));
  }
  const std::optional<telemetry::Slowest> slowest = telemetry::slowest_rank(epoch_ranks_);
  if (!slowest) return;
  double step_ms = 0;
  for (const auto& s : epoch_ranks_) step_ms += s.step_ms;
  step_ms /= static_cast<double>(epoch_ranks_.size());
  const auto& worst = epoch_ranks_[static_cast<size_t>(slowest->rank)];
  const double own = worst.compute_ms + worst.input_ms + worst.transfer_ms;
  const double others = own / (1 + slowest->slower_by);
  logs["slowest_rank"] = slowest->rank;
  logs["slowest_rank_share"] = step_ms > 0 ? std::max(0.0, own - others) / step_ms : 0.0;
}

void StepTelemetry::publish_job(const telemetry::JobRecord& job) {
  if (!chief_ || !store_) return;
  telemetry::publish_job(*store_, job);
}

void StepTelemetry::publish_epoch(int64_t epoch, int64_t step, const Logs& logs) {
  if (!chief_ || !store_) return;
  telemetry::publish_epoch(*store_, epoch,
                           {.epoch = epoch, .step = step, .unix_time_s = telemetry::unix_now_s(), .logs = logs});
}

}  // namespace cohort
