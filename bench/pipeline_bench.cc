// pipeline_bench: pipeline efficiency of cohort::Pipeline against the
// ideal bubble model, and activation memory of 1F1B against GPipe (issue 7).
// Run under cohortrun, one rank per stage:
//
//   cohortrun -np 4 build/bench/pipeline_bench [--ms 10] [--steps 5] [--max-m 16]
//
// Every stage has a synthetic known cost: a custom autograd function sleeps
// --ms per micro-batch forward and twice that per backward (sleeping leaves
// the cores to the other ranks, so the schedule, not the machine, sets the
// time). One stage alone would take m * 3 * ms per step; p stages in a
// perfect pipeline take (m + p - 1) * 3 * ms, an efficiency of m / (m + p - 1).
// For m = 1..--max-m and both schedules the bench measures the step time
// (median of --steps steps after one warm-up: the median shrugs off the
// odd step another process on the machine delays), the efficiency
// m * 3 * ms / step, and its ratio to the ideal (1.0: the bubble model holds
// exactly). Then, at m = 8 with activations of --width floats per row, it
// reports each stage's peak live micro-batches and peak activation bytes
// from Pipeline::stats() under both schedules. Rank 0 prints a Markdown
// table.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/flags.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/model_parallel/pipeline.h"

using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  double ms = 10;
  int steps = 5;
  int max_m = 16;
  int rows_per_micro_batch = 4;
  int width = 1024;
};

Flags parse(int argc, char** argv) {
  namespace flags = cohort::flags;
  Flags f;
  flags::parse_flags(std::vector<std::string>(argv + 1, argv + argc),
                  {{"--ms", [&](auto& n, auto& v) { f.ms = flags::parse_number<double>(n, v, 0.0); }},
                   {"--steps", [&](auto& n, auto& v) { f.steps = flags::parse_number<int>(n, v, 1); }},
                   {"--max-m", [&](auto& n, auto& v) { f.max_m = flags::parse_number<int>(n, v, 1); }},
                   {"--rows", [&](auto& n, auto& v) { f.rows_per_micro_batch = flags::parse_number<int>(n, v, 1); }},
                   {"--width", [&](auto& n, auto& v) { f.width = flags::parse_number<int>(n, v, 1); }}},
                  {});
  return f;
}

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

// Identity with a known cost: ms forward, 2 ms backward.
struct Busy : torch::autograd::Function<Busy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double ms) {
    ctx->saved_data["ms"] = ms;
    sleep_ms(ms);
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    sleep_ms(2 * ctx->saved_data["ms"].toDouble());
    return {grad[0], at::Tensor()};
  }
};

struct StageImpl : torch::nn::Module {
  explicit StageImpl(double ms) : ms(ms) { scale = register_parameter("scale", torch::ones({1})); }
  at::Tensor forward(const at::Tensor& x) { return Busy::apply(x * scale, ms); }
  double ms;
  at::Tensor scale;
};
TORCH_MODULE(Stage);

}  // namespace

int main(int argc, char** argv) try {
  const Flags f = parse(argc, argv);
  cohort::set_intra_op_threads(1);
  cohort::init();
  const int p = cohort::size();
  cohort::Mesh mesh({.pp = p}, {.engines = false});
  const int rank = mesh.rank(cohort::MeshAxis::pp);
  Stage stage(f.ms);
  auto loss_fn = [](const at::Tensor& out, const at::Tensor&) { return out.mean(); };

  if (rank == 0)
    std::printf("### p = %d stages, %.1f ms forward + %.1f ms backward per micro-batch and stage\n\n"
                "| m | schedule | step ms | ideal step ms | efficiency | ideal m/(m+p-1) | measured/ideal |\n"
                "|---|---|---|---|---|---|---|\n",
                p, f.ms, 2 * f.ms);
  for (int m = 1; m <= f.max_m; ++m)
    for (cohort::Schedule schedule : {cohort::Schedule::gpipe, cohort::Schedule::one_f_one_b}) {
      cohort::Pipeline pipe(stage, mesh.comm(cohort::MeshAxis::pp), {.micro_batches = m, .schedule = schedule});
      const at::Tensor x = torch::randn({int64_t(m) * f.rows_per_micro_batch, 16});
      std::vector<double> times;
      for (int s = 0; s <= f.steps; ++s) {
        const auto t0 = Clock::now();
        pipe.train_step(x, x, loss_fn);
        const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (s > 0) times.push_back(dt);  // step 0 warms up
      }
      std::sort(times.begin(), times.end());
      // Stage 0's clock: every stage leaves train_step at the loss broadcast.
      const double step = times[times.size() / 2];
      const double work = m * 3 * f.ms;
      const double ideal = double(m) / double(m + p - 1);
      if (rank == 0)
        std::printf("| %d | %s | %.1f | %.1f | %.3f | %.3f | %.3f |\n", m, cohort::schedule_name(schedule), step,
                    (m + p - 1) * 3 * f.ms, work / step, ideal, work / step / ideal);
    }

  // Activation memory at m = 8.
  const int m = 8;
  std::vector<std::vector<double>> rows;  // per schedule: every stage's [live, bytes]
  for (cohort::Schedule schedule : {cohort::Schedule::gpipe, cohort::Schedule::one_f_one_b}) {
    Stage fast(0.0);
    cohort::Pipeline pipe(fast, mesh.comm(cohort::MeshAxis::pp), {.micro_batches = m, .schedule = schedule});
    const at::Tensor x = torch::randn({int64_t(m) * f.rows_per_micro_batch, f.width});
    pipe.train_step(x, x, loss_fn);
    const auto st = pipe.stats();
    // Gathered over the world engine (not the pipeline's communicator).
    const at::Tensor mine = torch::tensor({double(st.peak_live_micro_batches), double(st.peak_activation_bytes)},
                                          torch::kDouble);
    const at::Tensor all = cohort::allgather(mine.reshape({1, 2}));
    rows.emplace_back(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  }
  if (rank == 0) {
    std::printf("\n### Activation memory, p = %d, m = %d, %d rows x %d floats per micro-batch\n\n"
                "| stage | GPipe live | GPipe peak bytes | 1F1B live | 1F1B peak bytes | 1F1B/GPipe |\n"
                "|---|---|---|---|---|---|\n",
                p, m, f.rows_per_micro_batch, f.width);
    for (int s = 0; s < p; ++s)
      std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.3f |\n", s, rows[0][2 * s], rows[0][2 * s + 1], rows[1][2 * s],
                  rows[1][2 * s + 1], rows[1][2 * s + 1] / rows[0][2 * s + 1]);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pipeline_bench: %s\n", cohort::flags::one_line_message(e).c_str());
  return 1;
}
