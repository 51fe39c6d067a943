// fashion_mnist: a Fashion-MNIST classifier trained with fit(). The strategy
// flag alone decides whether it runs on one device, on several replicas in
// this process, or on every rank of a job (cohortrun, mpirun, srun, hosts);
// see usage() in options.cc for the flags.
//
//   cohortrun -np 2 build/examples/fashion_mnist --strategy multi_worker --epochs 2
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdio>

#include "cohort/common/flags.h"
#include "cohort/models/image_classifiers.h"
#include "examples/fashion_mnist/dataset.h"
#include "examples/fashion_mnist/options.h"

namespace ex = cohort::examples;

namespace {

int train(const ex::TrainOptions& o) {
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);
  auto strategy = cohort::make_strategy(o.strategy);
  torch::manual_seed(o.seed);  // the same initial weights on every rank (and the chief's are broadcast)

  const ex::FashionMnist data = ex::load_fashion_mnist(o.data_dir, o.limit_train, o.limit_test);
  const cohort::TensorDataset train(data.train_images, data.train_labels, ex::to_input);
  const cohort::TensorDataset test(data.test_images, data.test_labels, ex::to_input);

  cohort::OptimizerFactory optimizer =
      o.optimizer == "adam"
          ? cohort::optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(o.lr))
          : cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(o.lr).momentum(o.momentum));
  cohort::Model model(*strategy, cohort::models::fashion_mnist_classifier(o.model),
                      {.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); },
                       .optimizer = optimizer,
                       .metrics = {cohort::accuracy()}});

  const int64_t steps_per_epoch = (train.size() + o.batch_size - 1) / o.batch_size;
  std::vector<std::shared_ptr<cohort::Callback>> callbacks = {
      cohort::learning_rate_scheduler(cohort::linear_warmup(
          cohort::constant_lr(o.lr), std::llround(o.warmup_epochs * double(steps_per_epoch)), 0.0)),
      cohort::progress_bar({.style = o.progress})};
  if (!o.backup.empty()) callbacks.push_back(cohort::backup_and_restore(o.backup, {.every_steps = o.backup_every}));
  if (!o.checkpoint.empty())
    callbacks.push_back(cohort::model_checkpoint(o.checkpoint, {.every_steps = o.checkpoint_every}));
  if (!o.metrics.empty()) callbacks.push_back(cohort::json_lines_logger(o.metrics, {.every_steps = o.log_every}));
  if (!o.csv.empty()) callbacks.push_back(cohort::csv_logger(o.csv));

  if (model.is_chief())
    std::printf("fashion_mnist: %s on %s (%d replica%s), global batch %d, %s lr %g, %lld train / %lld test examples\n",
                o.model.c_str(), strategy->spec().c_str(), strategy->replicas_in_sync(),
                strategy->replicas_in_sync() == 1 ? "" : "s", o.batch_size, o.optimizer.c_str(), o.lr,
                (long long)train.size(), (long long)test.size());
  const cohort::History history = model.fit(train, {.epochs = o.epochs,
                                                    .batch_size = o.batch_size,
                                                    .validation_data = &test,
                                                    .seed = o.seed,
                                                    .callbacks = callbacks});
  if (history.preempted()) {
    if (model.is_chief())
      std::printf("fashion_mnist: preempted at epoch %lld, batch %lld; %s\n", (long long)model.position().epoch + 1,
                  (long long)model.position().batch,
                  o.backup.empty() ? "no --backup: progress since the last checkpoint is lost"
                                   : ("backed up to " + o.backup + ": run the same command to resume").c_str());
    return cohort::kPreemptedExitCode;
  }
  const double accuracy = 100 * history.last().at("val_accuracy");
  if (model.is_chief()) {
    std::printf("fashion_mnist: final test accuracy %.2f%% after %d epochs\n", accuracy, o.epochs);
    for (const auto& [flag, path] : {std::pair{"metrics (JSON lines)", o.metrics}, {"checkpoint", o.checkpoint},
                                     {"history (CSV)", o.csv}})
      if (!path.empty()) std::printf("fashion_mnist: %s: %s\n", flag, path.c_str());
    std::fflush(stdout);
  }
  if (accuracy < o.target_accuracy) {
    if (model.is_chief())
      std::fprintf(stderr, "fashion_mnist: test accuracy %.2f%% is below --target-accuracy %g%%\n", accuracy,
                   o.target_accuracy);
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
    std::fprintf(stderr, "fashion_mnist: error: %s\n\n%s", cohort::flags::one_line_message(e).c_str(),
                 ex::usage().c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(ex::usage().c_str(), stdout);
    return 0;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", cohort::flags::one_line_message(e).c_str());
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
