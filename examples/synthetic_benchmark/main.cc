// synthetic_benchmark: training throughput on synthetic data under any
// strategy (Horovod's pytorch_synthetic_benchmark.py); --mode names the
// usual ones. See options.cc's usage() for flags; bench/vs_pytorch_ddp.sh
// races it against PyTorch DDP.
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cohort/common/flags.h"
#include "cohort/common/stats.h"
#include "cohort/models/image_classifiers.h"
#include "examples/synthetic_benchmark/options.h"

namespace synthetic = cohort::examples::synthetic;

namespace {

using cohort::median;

// The bytes each rank holds under zero (its counters, gathered) against
// the estimate for SGD with momentum (one state element per parameter).
void print_zero_memory(const cohort::ZeroStrategy& zero, int64_t params) {
  const cohort::ZeroMemory m = zero.memory();
  const at::Tensor all =
      cohort::allgather(at::tensor({m.parameters, m.gradients, m.optimizer, m.buffers}, at::kLong).view({1, 4}));
  if (cohort::rank() != 0) return;
  const double b = 4;  // float32 parameters, gradients and momentum
  const double estimate = cohort::zero_bytes_per_rank(double(params), b, b, zero.options().stage, cohort::size());
  std::printf("zero: the last step communicated %.2f Psi (%lld elements; Psi = %lld parameters)\n",
              double(zero.sharded().communicated()) / double(params), (long long)zero.sharded().communicated(),
              (long long)params);
  for (int64_t r = 0; r < all.size(0); ++r) {
    const int64_t* v = all[r].data_ptr<int64_t>();
    std::printf("memory rank %lld: parameters %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB, total %.1f MiB "
                "(estimate %.1f MiB); packing buffers %.1f MiB\n",
                (long long)r, v[0] / 1048576.0, v[1] / 1048576.0, v[2] / 1048576.0, (v[0] + v[1] + v[2]) / 1048576.0,
                estimate / 1048576.0, v[3] / 1048576.0);
  }
}

int run(const synthetic::BenchmarkOptions& o) {
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);
  // The ranks of the launch time their steps together, whatever the
  // strategy (--mode single: ranks that train alone).
  cohort::init();
  const int rank = cohort::rank(), size = cohort::size();
  const std::string spec = synthetic::strategy_spec(o);
  std::unique_ptr<cohort::Strategy> strategy =
      spec == "one_device" ? std::make_unique<cohort::OneDeviceStrategy>(cohort::OneDeviceOptions{.independent_ranks = true})
                           : cohort::make_strategy(spec);
  if (strategy->is_server()) return strategy->serve();  // parameter_server's servers: until the workers finish
  torch::manual_seed(42 + rank);  // different on purpose: the strategy starts every replica alike
  torch::nn::Sequential model = cohort::models::synthetic_classifier(o.model, o.width, o.depth);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  strategy->prepare(cohort::training_model(
      model, [](const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); },
      cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(o.lr).momentum(0.9))));
  // --batch-size rows on each process; a step's global batch is all of them.
  const cohort::Batch batch{at::randn({o.batch_size, 1, 28, 28}), at::randint(0, 10, {o.batch_size}, at::kLong)};
  const int64_t global_rows = int64_t(o.batch_size) * strategy->process_count();
  if (rank == 0)
    std::printf("synthetic_benchmark: model %s (%lld parameters), strategy %s, %d rank(s), batch %d per rank, "
                "%d threads\n",
                o.model.c_str(), static_cast<long long>(params), strategy->spec().c_str(), size, o.batch_size,
                torch::get_num_threads());
  // parameter_server's servers serve apart (above): the training
  // processes time their steps among themselves.
  const bool servers_apart = spec.starts_with("parameter_server");
  for (int i = 0; i < o.warmup; ++i) strategy->train_step(batch, global_rows);
  if (servers_apart)
    strategy->all_sum(at::zeros({1}, at::kDouble));
  else
    cohort::barrier();
  std::vector<double> local(size_t(o.steps));
  for (int i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    strategy->train_step(batch, global_rows);
    local[size_t(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // A step takes as long as its slowest rank; one reduction after the loop
  // keeps the measurement free of extra synchronisation.
  at::Tensor times =
      servers_apart
          ? std::get<0>(strategy->all_gather(at::tensor(local, at::kDouble).view({1, -1})).max(0))
          : cohort::allreduce(at::tensor(local, at::kDouble), {.op = cohort::ReduceOp::max});
  const int trainers = servers_apart ? strategy->process_count() : size;
  std::vector<double> slowest(times.data_ptr<double>(), times.data_ptr<double>() + times.numel());
  const double step_s = median(slowest);
  const double samples_per_s = double(o.batch_size) * trainers / step_s;
  if (rank == 0) {
    if (!o.quiet)
      for (size_t i = 0; i < slowest.size(); ++i)
        std::printf("step %zu: %.2f ms, %.1f samples/s\n", i + 1, 1e3 * slowest[i],
                    double(o.batch_size) * trainers / slowest[i]);
    std::printf("median of %d steps: %.2f ms/step, %.1f samples/s\n", o.steps, 1e3 * step_s, samples_per_s);
    std::printf("{\"bench\":\"synthetic_benchmark\",\"model\":\"%s\",\"strategy\":\"%s\",\"ranks\":%d,"
                "\"batch_per_rank\":%d,\"steps\":%d,\"threads\":%d,\"blas_threads\":%d,\"step_ms\":%.3f,"
                "\"samples_per_s\":%.1f}\n",
                o.model.c_str(), strategy->spec().c_str(), trainers, o.batch_size, o.steps, torch::get_num_threads(),
                cohort::blas_threads(), 1e3 * step_s, samples_per_s);
    std::fflush(stdout);
  }
  if (const auto* zero = dynamic_cast<const cohort::ZeroStrategy*>(strategy.get())) print_zero_memory(*zero, params);
  strategy.reset();
  cohort::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  synthetic::BenchmarkOptions o;
  try {
    o = synthetic::parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "synthetic_benchmark: %s (see --help)\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  }
  if (o.help) {
    std::cout << synthetic::usage();
    return 0;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_benchmark: %s\n", cohort::flags::one_line_message(e).c_str());
    return dynamic_cast<const cohort::ConfigError*>(&e) ? 2 : 1;
  }
}
