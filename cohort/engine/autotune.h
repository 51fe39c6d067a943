// Autotuner: finds the engine's fusion threshold and cycle time online,
// during a job's first steps, from the job's own step times (COHORT_AUTOTUNE),
// and with them DDP's bucket cap when DDP drives the steps (one search: the
// three interact, and two tuners measuring the same steps would confound
// each other's samples).
//
// It is fed one number per training step (the step's duration on rank 0)
// and says which parameters to run with; the engine agrees on rank 0's
// choice through its cycle records, so every rank switches at the same
// cycle, and DDP agrees on its bucket cap by a broadcast at a step's start
// (engine.h, tune_step). Protocol:
//   - the first warmup_steps are ignored (names negotiated, DDP's bucket
//     rebuild, cold caches);
//   - a sample is settle_steps ignored after a change (the step that straddles
//     it) and then steps_per_sample measured steps; its score is their median
//     (interference from other processes only ever adds time);
//   - the search proposes the next point of a grid of log-spaced values;
//   - once converged, the best point is fixed for the rest of the job.
//
// The search (method coordinate): the start (the configured values) first,
// as the baseline; then the bucket caps (when tuned), then the fusion
// thresholds with the cycle time fixed, then the cycle times with the
// threshold found, each coarse to fine: the grid's two ends and middle, then
// from the best so far to its better neighbours until none is better;
// finally the winner and the baseline are
// measured once more each and the better mean wins, so that a lucky sample
// cannot make the job slower than it was configured. The coarse points
// first make the early comparisons between settings far apart, whose
// differences stand out of the noise; the neighbour steps need each
// coordinate's step time to be unimodal in log scale (too small: more
// collectives and cycles; too large: less overlap, larger copies). With the
// default grids (7 thresholds, 4 cycle times) it takes about 11 samples:
// under 50 steps with 3 warm-up steps, 3 per sample and 1 to settle after a
// change. DDP's 6 bucket caps add 3 to 5 samples (the ends, the middle,
// better neighbours), and its changes take effect at a step's start on
// every rank, so no step straddles one and nothing needs to settle
// (settle_steps 0): 42-48 steps in bench/README.md's runs.
//
// Why not Bayesian optimisation (Horovod's): with two parameters, a few
// dozen points and samples that must stay within a job's first ~50 steps, a
// Gaussian process has too few points to learn its length scales and noise,
// and BO's exploration spends samples on poor corners; bench/README.md
// compares both on simulated cost surfaces with noise (method bayesian is
// kept for that comparison).
//
// Pure logic: no clock, no threads; tests drive it with synthetic costs.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace cohort::engine {

struct AutotuneParams {
  int64_t fusion_threshold_bytes = 0;
  int64_t cycle_time_us = 0;
  int64_t bucket_bytes = 0;  // DDP's bucket cap; 0: not tuned
  bool operator==(const AutotuneParams&) const = default;
};

// DDP's bucket caps to try (the start's, 25 MiB by default, is added): 1 to
// 256 MiB, whole MiB as multi_worker's bucket_mb can say them.
std::vector<int64_t> default_bucket_grid();

enum class AutotuneMethod { coordinate, bayesian };

struct AutotuneOptions {
  // Candidate values, ascending. The start's values are added when missing.
  std::vector<int64_t> fusion_thresholds = {0, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  std::vector<int64_t> cycle_times_us = {0, 250, 1000, 4000};
  // Empty: the bucket cap is not tuned (it stays the start's).
  std::vector<int64_t> bucket_bytes = {};
  AutotuneMethod method = AutotuneMethod::coordinate;
  int warmup_steps = 3;
  int settle_steps = 1;
  int steps_per_sample = 3;
  int max_samples = 11;  // bayesian: its budget (coordinate needs no bound)
  uint64_t seed = 1;     // bayesian: its initial random points
};

struct AutotuneTrial {
  AutotuneParams params;
  double seconds_per_step = 0;  // the sample's median step time
  int step = 0;                 // the step that completed the sample
};

class Autotuner {
 public:
  // `start`: the parameters the job was configured with (the baseline).
  Autotuner(AutotuneParams start, AutotuneOptions options = {});

  // One training step took `seconds` under current(). Returns true when
  // current() changed (the caller applies it from the next step on).
  bool on_step(double seconds);

  // Ends the search now, at the start's parameters (a search cut short has
  // too few samples to trust its best so far).
  void stop();

  const AutotuneParams& current() const { return current_; }
  bool converged() const { return converged_; }
  // Steps seen so far, and when the search converged (-1: not yet).
  int steps() const { return steps_; }
  int converged_at_step() const { return converged_at_; }
  const std::vector<AutotuneTrial>& trials() const { return trials_; }
  const AutotuneParams& start() const { return start_; }

 private:
  struct Point {
    size_t i = 0, j = 0, k = 0;  // indices into the grids: threshold, cycle time, bucket cap
    bool operator==(const Point&) const = default;
  };
  // The next point to measure, or nullopt when the search is over (best_
  // then holds the answer).
  std::optional<Point> propose();
  std::optional<Point> propose_coordinate();
  std::optional<Point> propose_bayesian();
  std::optional<double> score(const Point& p) const;  // mean of its samples
  int samples_of(const Point& p) const;
  AutotuneParams params(const Point& p) const;
  void begin_sample(const Point& p);

  AutotuneOptions o_;
  AutotuneParams start_, current_;
  Point start_point_, point_, best_;
  std::vector<std::pair<Point, double>> results_;  // every sample, in order
  std::vector<AutotuneTrial> trials_;
  std::vector<double> window_;
  int steps_ = 0;
  int skip_ = 0;  // steps still to ignore
  bool converged_ = false;
  int converged_at_ = -1;
};

// StepClock: training steps as the engine sees them. The first op to
// complete a second time becomes the marker; that completion and each later
// one end a step, of the time since the previous one. Data-parallel training
// completes the same ops once per step, so any op that recurs marks steps;
// ops that run once (the initial broadcast of the parameters) never become
// the marker. (An op that recurs several times per step would mark
// fractions of steps; DDP buckets of equal sizes can.)
class StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  // The step that ended with this completion, if one did.
  std::optional<Clock::duration> observe(uint64_t op, Clock::time_point at) {
    if (!marker_) {
      const auto [it, first] = first_seen_.emplace(op, at);
      if (first) return std::nullopt;
      marker_ = op;
      last_ = it->second;
      first_seen_.clear();
    } else if (op != *marker_) {
      return std::nullopt;
    }
    const auto step = at - last_;
    last_ = at;
    return step;
  }

 private:
  std::optional<uint64_t> marker_;
  std::unordered_map<uint64_t, Clock::time_point> first_seen_;  // until the marker is found
  Clock::time_point last_{};
};

// An op's identity for StepClock: its name (named ops), or its signature
// (ordered ops: kind, dtype, attributes and count).
uint64_t op_identity(const std::string& name);
uint64_t op_identity(uint64_t signature, uint64_t count);

// A CSV line per trial ("step,fusion_threshold_bytes,cycle_time_us,seconds_per_step,bucket_bytes").
std::string autotune_csv(const Autotuner& tuner);

}  // namespace cohort::engine
