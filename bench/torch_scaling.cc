// torch_scaling: training throughput of cohort's DistributedOptimizer on the
// fashion_mnist models, run under cohortrun at several rank counts by
// torch_scaling.sh (see torch_scaling.md).
//
// Each rank trains on a fixed synthetic batch (no data loading in the
// measurement), in two phases measured the same way:
//   local        the plain optimizer, no communication: what the machine
//                computes at this rank count (the ceiling);
//   distributed  the same steps through DistributedOptimizer (allreduce of
//                every gradient, overlapped with backward).
// The step count is calibrated so that a phase lasts about --seconds; the
// phases alternate --rounds times and the best round of each counts, so both
// see the same machine state. A phase's time is the largest over ranks; rank
// 0 prints one JSON line.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cohort/common/error.h"
#include "cohort/common/flags.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"

using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string model = "cnn";
  int batch_size = 64;
  double seconds = 1.0;  // per phase and round
  int rounds = 3;
  int warmup_steps = 10;
  int threads = 0;
  std::string compression = "none";
};

Flags parse(int argc, char** argv) {
  namespace flags = cohort::flags;
  Flags f;
  flags::parse_flags(
      std::vector<std::string>(argv + 1, argv + argc),
      {{"--model", [&](auto&, auto& v) { f.model = v; }},
       {"--batch-size", [&](auto& n, auto& v) { f.batch_size = flags::parse_number<int>(n, v, 1); }},
       {"--seconds", [&](auto& n, auto& v) { f.seconds = flags::parse_number<double>(n, v); }},
       {"--rounds", [&](auto& n, auto& v) { f.rounds = flags::parse_number<int>(n, v, 1); }},
       {"--warmup-steps", [&](auto& n, auto& v) { f.warmup_steps = flags::parse_number<int>(n, v, 1); }},
       {"--threads", [&](auto& n, auto& v) { f.threads = flags::parse_number<int>(n, v, 0); }},
       {"--compression", [&](auto&, auto& v) { f.compression = v; }}},
      {});
  if (f.seconds <= 0) throw cohort::ConfigError("--seconds must be positive");
  return f;
}

// The largest of `seconds` over ranks.
double slowest(const std::string& name, double seconds) {
  return cohort::allreduce(torch::tensor({seconds}, torch::kDouble), {.name = name, .op = cohort::ReduceOp::max})
      .item<double>();
}

// Seconds for `steps` steps, started together, the largest over ranks.
template <typename Step>
double timed(const std::string& name, int steps, Step step) {
  cohort::barrier({.name = name + "/start"});
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  return slowest(name + "/time", std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Flags f = parse(argc, argv);
    cohort::init();
    if (f.threads > 0) cohort::set_intra_op_threads(f.threads);
    const int rank = cohort::rank(), size = cohort::size();
    torch::manual_seed(1 + rank);
    const at::Tensor x = torch::randn({f.batch_size, 1, 28, 28});
    const at::Tensor y = torch::randint(0, 10, {f.batch_size}, torch::kLong);

    torch::nn::Sequential model = cohort::models::fashion_mnist_classifier(f.model);
    cohort::broadcast_parameters(*model, 0);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    auto train_step = [&](auto& optimizer) {
      optimizer.zero_grad();
      torch::nn::functional::cross_entropy(model->forward(x), y).backward();
      optimizer.step();
    };
    const cohort::DistributedOptimizerOptions dist_options{.compression = cohort::parse_compression(f.compression)};
    auto local_step = [&] { train_step(sgd); };
    // The wrapper lives only during its phase: its gradient hooks would
    // otherwise fire in the local phase too.
    auto distributed_phase = [&](const std::string& name, int steps) {
      cohort::DistributedOptimizer dist(sgd, model->named_parameters(), dist_options);
      return timed(name, steps, [&] { train_step(dist); });
    };
    // Warm-up (allocator, caches, the engine's response cache), which also
    // calibrates the step count on the slower of the two.
    const double warm =
        std::max(timed("warmup/local", f.warmup_steps, local_step), distributed_phase("warmup/distributed", f.warmup_steps));
    const int steps = std::max(5, int(f.seconds * f.warmup_steps / warm));
    double local = 1e300, distributed = 1e300;
    for (int round = 0; round < f.rounds; ++round) {
      const std::string r = std::to_string(round);
      local = std::min(local, timed("local/" + r, steps, local_step));
      distributed = std::min(distributed, distributed_phase("distributed/" + r, steps));
    }

    if (rank == 0) {
      const double samples = double(f.batch_size) * steps * size;
      std::printf("{\"bench\":\"torch_scaling\",\"model\":\"%s\",\"ranks\":%d,\"batch_per_rank\":%d,\"steps\":%d,"
                  "\"threads\":%d,\"compression\":\"%s\",\"local_samples_per_s\":%.1f,\"samples_per_s\":%.1f,"
                  "\"step_ms\":%.3f}\n",
                  f.model.c_str(), size, f.batch_size, steps, torch::get_num_threads(), f.compression.c_str(),
                  samples / local, samples / distributed, 1e3 * distributed / steps);
      std::fflush(stdout);
    }
    cohort::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_scaling: error: %s\n", cohort::flags::one_line_message(e).c_str());
    return 1;
  }
}
