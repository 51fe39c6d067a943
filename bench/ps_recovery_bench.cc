// ps_recovery_bench: time from a parameter server's death to the next
// applied update, with real processes (tests/parameter_server/ps_job.h
// starts ps_rank_program ranks, as the process tests do).
//
//   build/bench/ps_recovery_bench [--reps 5] [--steps 12] [--kill-step 5]
//
// A job of 2 workers and 2 servers trains the test problem; before
// committing step K worker 0 kills server 1 (SIGKILL). Recovery is the time
// from the kill to worker 0's pull of step K+1 (which a synchronous job
// serves only once step K is applied everywhere, on the partition's new
// owner too), against the median step time of the same run. Two ways back:
// the replica on server 0 (replicas=1), or the last checkpoint
// (checkpoint_dir, written at step 3 by a first job).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cohort/common/flags.h"
#include "cohort/common/stats.h"
#include "tests/parameter_server/ps_job.h"

using namespace cohort::ps::testing;

namespace {

using cohort::median;

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, steps = 12, kill_step = 5;
  const int rc = cohort::flags::parse_int_flags(
      argc, argv, {{"--reps", &reps}, {"--steps", &steps}, {"--kill-step", &kill_step}});
  if (rc != 0) return rc;
  char pattern[] = "/tmp/ps_recovery_bench.XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(pattern);
  const std::string ckpt = (dir / "ckpt").string();
  PsJob job(dir);
  const Outcome first = job.launch(4, {"servers=2", "shards=2", "steps=3", "rule=sgd", "save=" + ckpt});
  if (!first.problems.empty()) {
    std::fprintf(stderr, "checkpoint job failed: %s\n", first.problems.c_str());
    return 1;
  }
  struct Mode {
    const char* name;
    std::vector<std::string> args;
  };
  const std::vector<Mode> modes = {
      {"replica", {"replicas=1"}},
      {"checkpoint", {"load=" + ckpt, "checkpoint_dir=" + ckpt}},
  };
  std::vector<std::vector<double>> recovery(modes.size()), step(modes.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t m = 0; m < modes.size(); ++m) {  // interleaved
      std::vector<std::string> args = {"servers=2", "shards=2", "rule=sgd", "timeline=1",
                                       "steps=" + std::to_string(steps), "kill_server=1",
                                       "kill_step=" + std::to_string(kill_step)};
      args.insert(args.end(), modes[m].args.begin(), modes[m].args.end());
      const Outcome o = job.launch(4, args);
      const auto events = timeline_of(o.output[0]);
      const int64_t kill = event_ns(events, 0, "kill", kill_step);
      const int64_t next = event_ns(events, 0, "pulled", kill_step + 1);
      if (kill < 0 || next < 0) {
        std::fprintf(stderr, "%s: no kill or next pull in worker 0's output:\n%s\n%s", modes[m].name,
                     o.output[0].c_str(), o.problems.c_str());
        return 1;
      }
      recovery[m].push_back((next - kill) / 1e6);
      std::vector<double> steps_ms;
      for (int s = 1; s < kill_step; ++s) {
        const int64_t a = event_ns(events, 0, "pulled", s - 1), b = event_ns(events, 0, "pulled", s);
        if (a >= 0 && b >= 0) steps_ms.push_back((b - a) / 1e6);
      }
      step[m].push_back(median(steps_ms));
    }
  }
  std::printf("| restored from | recovery: kill to next applied update (ms, median of %d) | step time before (ms) |\n",
              reps);
  std::printf("|---|---|---|\n");
  for (size_t m = 0; m < modes.size(); ++m)
    std::printf("| %s | %.1f | %.2f |\n", modes[m].name, median(recovery[m]), median(step[m]));
  std::filesystem::remove_all(dir);
  return 0;
}
