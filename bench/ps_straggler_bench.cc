// ps_straggler_bench: throughput of a parameter-server job with a straggler
// (a worker whose step takes twice as long), at staleness=0, staleness=4
// and async, with real processes (tests/parameter_server/ps_job.h runs
// ps_rank_program).
//
//   build/bench/ps_straggler_bench [--reps 3] [--workers 3] [--steps 60] [--step-ms 20] [--burst 4]
//
// Every worker's step takes --step-ms more than its compute (a sleep), a
// straggler's twice that. Two kinds of straggler, each run in all modes:
//   persistent  the last worker, on every step.
//   rotating    one worker at a time, for --burst steps each: worker k on
//               its steps s with (s / burst) mod workers == k (a co-tenant,
//               a GC pause, a noisy disk that moves around the cluster).
// Throughput: steps completed by all workers per second while all of them
// train, from the first worker's first pull to the first worker's last
// commit (past that, a finished worker no longer competes). Modes are
// interleaved within each repetition; medians over repetitions.
//
// The loss curve: each step's batch loss at the parameters it pulled
// (problem.h), averaged over the steps pulled in each quarter of a common
// horizon H (the shortest mode's window of that repetition and straggler),
// so the modes are compared at the same wall-clock times. Also the final
// loss of the embedding part (0.5 sum ||emb - target||^2, optimum 0).
//
// What to expect: under a persistent straggler, staleness=K lets the fast
// workers run at most K steps ahead and then paces them at the slowest's
// rate, so over a long run it gains K steps, no more: only async keeps the
// fast workers at their own rate. Bounded staleness pays off when the slow
// worker changes (rotating): with W workers the synchronous step always
// waits for one slow worker (2 D), while each bounded worker averages
// (W + 1) D / W, a 2 W / (W + 1) gain (1.5 at W = 3).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/common/flags.h"
#include "cohort/common/stats.h"
#include "tests/parameter_server/ps_job.h"

using namespace cohort::ps::testing;

namespace {

using cohort::median;

// 0.5 sum over rows of ||emb[row] - target(row)||^2 from a result file (w, then emb).
double embedding_loss(const std::vector<double>& result, const Problem& p) {
  const size_t offset = static_cast<size_t>(p.dims * p.outputs);
  double loss = 0;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) {
      const double d = result.at(offset + r * p.cols + c) - uniform(r, 99, c);
      loss += 0.5 * d * d;
    }
  return loss;
}

// A run's steps: when each was pulled (ns) and its batch loss.
struct StepRecord {
  int64_t pulled_ns = 0;
  double loss = 0;
};

struct Run {
  int64_t first_ns = -1;                        // the first worker's first pull
  int64_t window_end_ns = -1;                   // the first worker to finish: its "done"
  double completions_in_window = 0;             // steps completed in [first, end]
  std::vector<StepRecord> steps;                // every worker's
  std::string failure;                          // empty when every worker finished
};

Run read_run(const Outcome& o, int workers, int64_t steps) {
  Run run;
  std::vector<TimelineEvent> events;
  std::map<std::pair<int, int64_t>, double> losses;
  for (int k = 0; k < workers; ++k) {
    const auto mine = timeline_of(o.output[k]);
    events.insert(events.end(), mine.begin(), mine.end());
    std::istringstream in(o.output[k]);
    for (std::string line; std::getline(in, line);) {
      std::istringstream l(line);
      std::string tag;
      int worker;
      int64_t step;
      double loss;
      if (l >> tag >> worker >> step >> loss && tag == "loss") losses[{worker, step}] = loss;
    }
    const int64_t start = event_ns(mine, k, "pulled", 0), end = event_ns(mine, k, "done", steps);
    if (start < 0 || end < 0) {
      run.failure = "worker " + std::to_string(k) + " did not finish:\n" + o.output[k] + o.problems;
      return run;
    }
    run.first_ns = run.first_ns < 0 ? start : std::min(run.first_ns, start);
    run.window_end_ns = run.window_end_ns < 0 ? end : std::min(run.window_end_ns, end);
  }
  for (const TimelineEvent& e : events) {
    // A pull of step s > 0, or "done", marks the completion of the step before.
    const bool completes = (e.event == "pulled" && e.step > 0) || e.event == "done";
    if (completes && e.ns <= run.window_end_ns) run.completions_in_window += 1;
    if (e.event == "pulled") run.steps.push_back({e.ns, losses.at({e.worker, e.step})});
  }
  return run;
}

double steps_per_second(const Run& run) {
  return run.completions_in_window / ((run.window_end_ns - run.first_ns) / 1e9);
}

// Mean batch loss of the steps pulled in ((q - 1) H / 4, q H / 4] after the start.
double quarter_loss(const Run& run, int64_t horizon_ns, int q) {
  double sum = 0;
  int n = 0;
  for (const StepRecord& s : run.steps) {
    const int64_t t = s.pulled_ns - run.first_ns;
    if (t > (q - 1) * horizon_ns / 4 && t <= q * horizon_ns / 4) {
      sum += s.loss;
      ++n;
    }
  }
  return n ? sum / n : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3, workers = 3, steps = 60, step_ms = 20, burst = 4;
  const int rc = cohort::flags::parse_int_flags(argc, argv,
                                                {{"--reps", &reps},
                                                 {"--workers", &workers},
                                                 {"--steps", &steps},
                                                 {"--step-ms", &step_ms},
                                                 {"--burst", &burst}});
  if (rc != 0) return rc;
  char pattern[] = "/tmp/ps_straggler_bench.XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  PsJob job(dir);
  const std::vector<std::string> stragglers = {"persistent", "rotating"};
  const std::vector<std::string> modes = {"0", "4", "async"};
  // [straggler][mode] -> one value per repetition
  using Series = std::vector<std::vector<std::vector<double>>>;
  auto series = [&] { return Series(stragglers.size(), std::vector<std::vector<double>>(modes.size())); };
  Series rate = series(), ratio = series(), final_loss = series();
  std::vector<Series> curve(4, series());
  for (int r = 0; r < reps; ++r) {
    for (size_t g = 0; g < stragglers.size(); ++g) {
      std::vector<Run> runs(modes.size());
      for (size_t m = 0; m < modes.size(); ++m) {
        std::vector<std::string> args = {"servers=1",
                                         "rule=sgd",
                                         "lr=0.2",
                                         "timeline=1",
                                         "staleness=" + modes[m],
                                         "steps=" + std::to_string(steps),
                                         "step_ms=" + std::to_string(step_ms),
                                         "straggle=" + stragglers[g],
                                         "burst=" + std::to_string(burst),
                                         "slow_worker=" + std::to_string(workers - 1)};
        runs[m] = read_run(job.launch(workers + 1, args), workers, steps);
        if (!runs[m].failure.empty()) {
          std::fprintf(stderr, "%s, staleness=%s: %s", stragglers[g].c_str(), modes[m].c_str(),
                       runs[m].failure.c_str());
          return 1;
        }
        final_loss[g][m].push_back(embedding_loss(job.result(0), Problem{}));
      }
      int64_t horizon = runs[0].window_end_ns - runs[0].first_ns;
      for (const Run& run : runs) horizon = std::min(horizon, run.window_end_ns - run.first_ns);
      for (size_t m = 0; m < modes.size(); ++m) {
        rate[g][m].push_back(steps_per_second(runs[m]));
        ratio[g][m].push_back(steps_per_second(runs[m]) / steps_per_second(runs[0]));
        for (int q = 1; q <= 4; ++q) curve[q - 1][g][m].push_back(quarter_loss(runs[m], horizon, q));
      }
    }
  }
  std::printf("%d workers + 1 server, %d steps each, %d ms per step (a straggler's %d ms), burst %d; medians of %d\n\n",
              workers, steps, step_ms, 2 * step_ms, burst, reps);
  std::printf("| straggler | staleness | steps/s, all workers | ratio to staleness=0 | batch loss at H/4 | H/2 |"
              " 3H/4 | H | final embedding loss |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t g = 0; g < stragglers.size(); ++g)
    for (size_t m = 0; m < modes.size(); ++m)
      std::printf("| %s | %s | %.1f | %.2f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", stragglers[g].c_str(),
                  modes[m].c_str(), median(rate[g][m]), median(ratio[g][m]), median(curve[0][g][m]),
                  median(curve[1][g][m]), median(curve[2][g][m]), median(curve[3][g][m]),
                  median(final_loss[g][m]));
  std::filesystem::remove_all(dir);
  return 0;
}
