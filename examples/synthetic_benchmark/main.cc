// synthetic_benchmark: training throughput on synthetic data, one mode per
// way of training in parallel (Horovod's pytorch_synthetic_benchmark.py).
// See options.cc's usage() for flags; bench/vs_pytorch_ddp.sh races it
// against PyTorch DDP.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "cohort/common/error.h"
#include "cohort/common/flags.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/data_parallel/data_parallel.h"
#include "cohort/torch/data_parallel/distributed_data_parallel.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "examples/synthetic_benchmark/options.h"

namespace synthetic = cohort::examples::synthetic;
using Sequential = torch::nn::Sequential;

namespace {

// One training step on (x, y); the object owns whatever the mode wraps the
// model in.
using StepFn = std::function<void(const at::Tensor& x, const at::Tensor& y)>;
using TrainerFactory = std::function<StepFn(Sequential model, const synthetic::BenchmarkOptions& o)>;

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(out, y);
}

torch::optim::SGDOptions sgd_options(const synthetic::BenchmarkOptions& o) {
  return torch::optim::SGDOptions(o.lr).momentum(0.9);
}

// The modes; a new one is one entry.
const std::map<std::string, TrainerFactory>& trainers() {
  static const std::map<std::string, TrainerFactory> table = {
      {"single",
       [](Sequential model, const synthetic::BenchmarkOptions& o) -> StepFn {
         auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgd_options(o));
         return [model, sgd](const at::Tensor& x, const at::Tensor& y) mutable {
           cohort::zero_grad_to_none(*sgd);  // as every mode and bench/pytorch_ddp_synthetic.py
           loss_of(model->forward(x), y).backward();
           sgd->step();
         };
       }},
      {"horovod",
       [](Sequential model, const synthetic::BenchmarkOptions& o) -> StepFn {
         cohort::broadcast_parameters(*model, 0);
         auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgd_options(o));
         auto opt = std::make_shared<cohort::DistributedOptimizer>(*sgd, model->named_parameters());
         return [model, sgd, opt](const at::Tensor& x, const at::Tensor& y) mutable {
           opt->zero_grad();
           loss_of(model->forward(x), y).backward();
           opt->step();
         };
       }},
      {"dp",
       [](Sequential model, const synthetic::BenchmarkOptions& o) -> StepFn {
         // One process: the replicas' threads are the parallelism, the batch
         // is split among them.
         auto dp = std::make_shared<cohort::DataParallel<Sequential>>(model, cohort::DataParallelOptions{.replicas = o.replicas});
         auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgd_options(o));
         return [dp, sgd](const at::Tensor& x, const at::Tensor& y) {
           cohort::zero_grad_to_none(*sgd);
           dp->train_step(x, y, loss_of);
           sgd->step();
         };
       }},
      {"ddp",
       [](Sequential model, const synthetic::BenchmarkOptions& o) -> StepFn {
         cohort::DistributedDataParallelOptions ddp_options;
         ddp_options.gradient_as_bucket_view = o.bucket_view;
         auto ddp = std::make_shared<cohort::DistributedDataParallel<Sequential>>(model, ddp_options);
         auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgd_options(o));
         return [ddp, sgd](const at::Tensor& x, const at::Tensor& y) {
           cohort::zero_grad_to_none(*sgd);
           loss_of((*ddp)(x), y).backward();
           sgd->step();
         };
       }},
  };
  return table;
}

std::vector<std::string> mode_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : trainers()) names.push_back(name);
  return names;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const synthetic::BenchmarkOptions& o) {
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);
  cohort::init();
  const int rank = cohort::rank(), size = cohort::size();
  torch::manual_seed(42 + rank);
  Sequential model = cohort::models::synthetic_classifier(o.model);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  StepFn step = trainers().at(o.mode)(model, o);
  at::Tensor x = at::randn({o.batch_size, 1, 28, 28});
  at::Tensor y = at::randint(0, 10, {o.batch_size}, at::kLong);
  if (rank == 0)
    std::printf("synthetic_benchmark: model %s (%lld parameters), mode %s, %d rank(s), batch %d per rank, %d threads\n",
                o.model.c_str(), static_cast<long long>(params), o.mode.c_str(), size, o.batch_size,
                torch::get_num_threads());
  for (int i = 0; i < o.warmup; ++i) step(x, y);
  cohort::barrier();
  std::vector<double> local(size_t(o.steps));
  for (int i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step(x, y);
    local[size_t(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // A step takes as long as its slowest rank; one reduction after the loop
  // keeps the measurement free of extra synchronisation.
  at::Tensor times = cohort::allreduce(at::tensor(local, at::kDouble), {.op = cohort::ReduceOp::max});
  std::vector<double> slowest(times.data_ptr<double>(), times.data_ptr<double>() + times.numel());
  const double step_s = median(slowest);
  const double samples_per_s = double(o.batch_size) * size / step_s;
  if (rank == 0) {
    if (!o.quiet)
      for (size_t i = 0; i < slowest.size(); ++i)
        std::printf("step %zu: %.2f ms, %.1f samples/s\n", i + 1, 1e3 * slowest[i],
                    double(o.batch_size) * size / slowest[i]);
    std::printf("median of %d steps: %.2f ms/step, %.1f samples/s\n", o.steps, 1e3 * step_s, samples_per_s);
    std::printf("{\"bench\":\"synthetic_benchmark\",\"model\":\"%s\",\"mode\":\"%s\",\"ranks\":%d,"
                "\"batch_per_rank\":%d,\"steps\":%d,\"threads\":%d,\"blas_threads\":%d,\"step_ms\":%.3f,"
                "\"samples_per_s\":%.1f}\n",
                o.model.c_str(), o.mode.c_str(), size, o.batch_size, o.steps, torch::get_num_threads(),
                cohort::blas_threads(), 1e3 * step_s, samples_per_s);
    std::fflush(stdout);
  }
  cohort::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  synthetic::BenchmarkOptions o;
  try {
    o = synthetic::parse_options(std::vector<std::string>(argv + 1, argv + argc), mode_names());
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "synthetic_benchmark: %s (see --help)\n",
                 cohort::flags::one_line_message(e).c_str());
    return 2;
  }
  if (o.help) {
    std::cout << synthetic::usage(mode_names());
    return 0;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_benchmark: %s\n", e.what());
    return dynamic_cast<const cohort::ConfigError*>(&e) ? 2 : 1;
  }
}
