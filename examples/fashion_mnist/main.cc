// fashion_mnist: data-parallel training of a Fashion-MNIST classifier with
// cohort, the way a LibTorch user would write it. Under cohortrun every rank
// runs this program; see usage() in options.cc for the flags.
//
//   cohortrun -np 2 build/examples/fashion_mnist --epochs 2 --metrics m.jsonl --checkpoint ck.bin
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cohort/common/error.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "examples/fashion_mnist/dataset.h"
#include "examples/fashion_mnist/lr_schedule.h"
#include "examples/fashion_mnist/metrics.h"
#include "examples/fashion_mnist/options.h"
#include "examples/fashion_mnist/progress.h"

namespace ex = cohort::examples;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Evaluation {
  double accuracy = 0, loss = 0;
};

// Each rank scores every size-th test example; the counts are summed over
// ranks, so the result is the whole test set's, identical on every rank.
Evaluation evaluate(torch::nn::Sequential& model, const at::Tensor& images, const at::Tensor& labels, int rank,
                    int size) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = images.size(0);
  const at::Tensor mine_x = images.slice(0, rank, n, size), mine_y = labels.slice(0, rank, n, size);
  double correct = 0, loss = 0;
  for (int64_t start = 0; start < mine_x.size(0); start += 1000) {
    const int64_t len = std::min<int64_t>(1000, mine_x.size(0) - start);
    const at::Tensor logits = model->forward(ex::to_input(mine_x.narrow(0, start, len)));
    const at::Tensor y = mine_y.narrow(0, start, len);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<double>();
  }
  const at::Tensor totals =
      cohort::allreduce(torch::tensor({correct, loss, double(mine_x.size(0))}, torch::kDouble),
                    {.name = "evaluate", .op = cohort::ReduceOp::sum});
  model->train();
  const double* t = totals.data_ptr<double>();
  return {t[0] / std::max(1.0, t[2]), t[1] / std::max(1.0, t[2])};
}

int64_t count_parameters(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

int train(const ex::TrainOptions& o) {
  cohort::init();
  const int rank = cohort::rank(), size = cohort::size();
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);
  torch::manual_seed(o.seed);

  const ex::FashionMnist data = ex::load_fashion_mnist(o.data_dir, o.limit_train, o.limit_test);
  torch::nn::Sequential model = cohort::models::fashion_mnist_classifier(o.model);
  const int64_t n_train = data.train_images.size(0);

  cohort::DistributedSampler sampler({.dataset_size = size_t(n_train), .num_replicas = size, .rank = rank,
                                  .shuffle = true, .seed = o.seed});
  const int64_t per_rank = int64_t(sampler.num_samples());
  const int64_t steps_per_epoch = (per_rank + o.batch_size - 1) / o.batch_size;
  const ex::LrSchedule schedule(o.lr, size, o.lr_scaling == "size",
                                std::llround(o.warmup_epochs * double(steps_per_epoch)));

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (o.optimizer == "adam")
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(schedule.at(0)));
  else
    optimizer = std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(schedule.at(0)).momentum(o.momentum));
  cohort::DistributedOptimizer dist_optimizer(*optimizer, model->named_parameters(),
                                          {.compression = cohort::parse_compression(o.compression)});

  cohort::TrainingState state;
  state.seed = o.seed;
  bool resumed = false;
  if (o.resume) {
    if (auto saved = cohort::resume_from_checkpoint(o.checkpoint, *model, *optimizer)) {
      state = *saved;
      resumed = true;
    }
  }
  if (!resumed) {
    // Every rank starts from rank 0's initialisation.
    cohort::broadcast_parameters(*model, 0);
    cohort::broadcast_optimizer_state(*optimizer, 0);
  }
  sampler = cohort::DistributedSampler({.dataset_size = size_t(n_train), .num_replicas = size, .rank = rank,
                                    .shuffle = true, .seed = state.seed});

  ex::MetricsWriter metrics;
  if (rank == 0 && !o.metrics.empty()) metrics = ex::MetricsWriter(o.metrics, /*append=*/o.resume);
  const ex::ProgressStyle style = ex::parse_progress_style(o.progress, stdout);
  if (rank == 0) {
    char lr[96];
    if (schedule.target() != o.lr)
      std::snprintf(lr, sizeof lr, "lr %g x %d ranks = %g (linear warm-up over %lld steps)", o.lr, size,
                    schedule.target(), (long long)schedule.warmup_steps());
    else
      std::snprintf(lr, sizeof lr, "lr %g", o.lr);
    std::printf("fashion_mnist: %s (%lld parameters), %d rank%s x batch %d = %lld per step, %s, %s, "
                "%lld train / %lld test examples, %d thread%s per rank\n",
                o.model.c_str(), (long long)count_parameters(*model), size, size == 1 ? "" : "s", o.batch_size,
                (long long)o.batch_size * size, o.optimizer.c_str(), lr, (long long)n_train,
                (long long)data.test_images.size(0), torch::get_num_threads(),
                torch::get_num_threads() == 1 ? "" : "s");
    if (resumed)
      std::printf("fashion_mnist: resumed from %s at epoch %lld, batch %lld (step %lld)\n", o.checkpoint.c_str(),
                  (long long)state.epoch + 1, (long long)state.batch, (long long)state.step);
    std::fflush(stdout);
    metrics.write(ex::JsonObject()
                      .add("event", "start")
                      .add("model", o.model)
                      .add("ranks", size)
                      .add("batch_size", o.batch_size)
                      .add("lr", schedule.target())
                      .add("epochs", o.epochs)
                      .add("resumed", resumed)
                      .add("step", state.step));
  }

  const auto run_start = Clock::now();
  Evaluation last;
  bool evaluated = false;
  for (int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<size_t> order = sampler.indices();
    const at::Tensor order_t =
        torch::tensor(std::vector<int64_t>(order.begin(), order.end()), torch::TensorOptions().dtype(torch::kLong));
    char label[64];
    std::snprintf(label, sizeof label, "[epoch %lld/%d]", (long long)epoch + 1, o.epochs);
    ex::Progress progress(stdout, rank == 0 ? style : ex::ProgressStyle::none, label, steps_per_epoch,
                          int64_t(o.batch_size) * size);
    double loss_sum = 0, samples = 0;
    const auto epoch_start = Clock::now();
    const int64_t first_batch = epoch == state.epoch ? state.batch : 0;
    for (int64_t b = first_batch; b < steps_per_epoch; ++b) {
      const int64_t start = b * o.batch_size, len = std::min<int64_t>(o.batch_size, per_rank - start);
      const at::Tensor batch = order_t.narrow(0, start, len);
      const at::Tensor x = ex::to_input(data.train_images.index_select(0, batch));
      const at::Tensor y = data.train_labels.index_select(0, batch);
      const double lr = schedule.at(state.step);
      for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);

      dist_optimizer.zero_grad();
      const at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      dist_optimizer.step();
      ++state.step;

      const double loss_value = loss.item<double>();
      loss_sum += loss_value * double(len);
      samples += double(len);
      progress.update(b + 1, loss_value);
      if (rank == 0 && state.step % o.log_every == 0)
        metrics.write(ex::JsonObject()
                          .add("event", "step")
                          .add("epoch", epoch + 1)
                          .add("step", state.step)
                          .add("loss", loss_value)
                          .add("lr", lr)
                          .add("seconds", seconds_since(run_start)));
      if (rank == 0 && !o.checkpoint.empty() && o.checkpoint_every > 0 && state.step % o.checkpoint_every == 0)
        cohort::save_checkpoint(o.checkpoint, *model, *optimizer,
                            {.epoch = epoch, .batch = b + 1, .step = state.step, .seed = state.seed});
    }
    progress.finish();
    const double train_seconds = seconds_since(epoch_start);
    const at::Tensor totals = cohort::allreduce(torch::tensor({loss_sum, samples}, torch::kDouble),
                                            {.name = "train_loss", .op = cohort::ReduceOp::sum});
    const double train_loss = totals[0].item<double>() / std::max(1.0, totals[1].item<double>());
    const double samples_per_s = totals[1].item<double>() / std::max(1e-9, train_seconds);
    last = evaluate(model, data.test_images, data.test_labels, rank, size);
    evaluated = true;
    state.epoch = epoch + 1;
    state.batch = 0;
    if (rank == 0) {
      std::printf("epoch %lld/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %s, %.0f samples/s\n",
                  (long long)epoch + 1, o.epochs, train_loss, last.loss, 100 * last.accuracy,
                  ex::Progress::format_duration(train_seconds).c_str(), samples_per_s);
      std::fflush(stdout);
      metrics.write(ex::JsonObject()
                        .add("event", "epoch")
                        .add("epoch", epoch + 1)
                        .add("step", state.step)
                        .add("train_loss", train_loss)
                        .add("test_loss", last.loss)
                        .add("test_accuracy", last.accuracy)
                        .add("train_seconds", train_seconds)
                        .add("samples_per_s", samples_per_s));
      if (!o.checkpoint.empty()) cohort::save_checkpoint(o.checkpoint, *model, *optimizer, state);
    }
  }
  if (!evaluated) last = evaluate(model, data.test_images, data.test_labels, rank, size);

  if (rank == 0) {
    std::printf("fashion_mnist: final test accuracy %.2f%% after %d epoch%s on %d rank%s (%s)\n",
                100 * last.accuracy, o.epochs, o.epochs == 1 ? "" : "s", size, size == 1 ? "" : "s",
                ex::Progress::format_duration(seconds_since(run_start)).c_str());
    if (!o.metrics.empty()) std::printf("fashion_mnist: metrics (JSON lines): %s\n", o.metrics.c_str());
    if (!o.checkpoint.empty()) std::printf("fashion_mnist: checkpoint: %s\n", o.checkpoint.c_str());
    std::fflush(stdout);
    metrics.write(ex::JsonObject()
                      .add("event", "final")
                      .add("test_accuracy", last.accuracy)
                      .add("test_loss", last.loss)
                      .add("epochs", o.epochs)
                      .add("ranks", size)
                      .add("step", state.step)
                      .add("seconds", seconds_since(run_start)));
  }
  cohort::shutdown();
  // Every rank holds the same (allreduced) accuracy, so all exit alike.
  if (100 * last.accuracy < o.target_accuracy) {
    if (rank == 0)
      std::fprintf(stderr, "fashion_mnist: test accuracy %.2f%% is below --target-accuracy %g%%\n",
                   100 * last.accuracy, o.target_accuracy);
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ex::TrainOptions options;
  try {
    options = ex::parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n\n%s", e.what(), ex::usage().c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(ex::usage().c_str(), stdout);
    return 0;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    // Tell the other ranks why this one stops, instead of leaving them to
    // time out waiting for it.
    if (cohort::initialized()) {
      try {
        cohort::current_engine().abort(e.what());
      } catch (...) {
      }
    }
    return dynamic_cast<const cohort::ConfigError*>(&e) ? 2 : 1;
  }
}
