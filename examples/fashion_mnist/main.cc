// fashion_mnist: a Fashion-MNIST classifier trained with fit(). The strategy
// flag alone decides whether it runs on one device, on several replicas in
// this process, or on every rank of a job (cohortrun, mpirun, srun, hosts);
// see usage() in options.cc for the flags.
//
//   cohortrun -np 2 build/examples/fashion_mnist --strategy multi_worker --epochs 2
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "cohort/common/flags.h"
#include "cohort/models/image_classifiers.h"
#include "examples/fashion_mnist/dataset.h"
#include "examples/fashion_mnist/options.h"
#include "examples/fashion_mnist/records.h"

namespace ex = cohort::examples;

namespace {

int train(const ex::TrainOptions& o) {
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);
  std::unique_ptr<cohort::Strategy> strategy = cohort::make_strategy(o.strategy_spec());
  if (strategy->is_server()) return strategy->serve();  // parameter_server's servers: until the workers finish
  torch::manual_seed(o.seed);  // the same initial weights on every rank (and the chief's are broadcast)

  // The data: IDX files as tensors, or TFRecord shards through the input
  // pipeline, normalised by the analyzers' statistics.
  std::unique_ptr<cohort::Dataset> train_tensors, test;
  std::unique_ptr<cohort::PipelineInput> train_records;
  if (o.data_format == "idx") {
    const ex::FashionMnist data = ex::load_fashion_mnist(o.data_dir, o.limit_train, o.limit_test);
    train_tensors = std::make_unique<cohort::TensorDataset>(data.train_images, data.train_labels, ex::to_input);
    test = std::make_unique<cohort::TensorDataset>(data.test_images, data.test_labels, ex::to_input);
  } else {
    const auto train_source = ex::fashion_mnist_records(o.data, "train", o.limit_train);
    const cohort::data::Transform transform = ex::analyze_fashion_mnist(*train_source, *strategy);
    if (!o.transform.empty() && strategy->is_chief()) transform.save(o.transform);
    train_records = std::make_unique<cohort::PipelineInput>(
        train_source, cohort::PipelineInputOptions{.pipeline = {.order = {.seed = o.seed}, .workers = o.workers}});
    train_records->map(transform.slice(0, ex::kDecodeSteps).as_map());
    if (o.augment) train_records->map(ex::augment_fashion_mnist);
    train_records->map(transform.slice(ex::kDecodeSteps, transform.steps()).as_map());
    auto [x, y] = ex::transformed_tensors(ex::fashion_mnist_records(o.data, "test", o.limit_test), transform);
    test = std::make_unique<cohort::TensorDataset>(x, y);
  }
  const int64_t train_size = train_tensors ? train_tensors->size() : train_records->size();

  cohort::OptimizerFactory optimizer = torch::optim::SGDOptions(o.lr).momentum(o.momentum);
  if (o.optimizer == "adam") optimizer = torch::optim::AdamOptions(o.lr);
  cohort::Model model(*strategy, cohort::models::fashion_mnist_classifier(o.model),
                      {.loss = torch::nn::CrossEntropyLoss(), .optimizer = optimizer, .metrics = {cohort::accuracy()}});

  const int64_t steps_per_epoch = (train_size + o.batch_size - 1) / o.batch_size;
  std::vector<std::shared_ptr<cohort::Callback>> callbacks = {
      cohort::learning_rate_scheduler(cohort::linear_warmup(
          cohort::constant_lr(o.lr), std::llround(o.warmup_epochs * double(steps_per_epoch)), 0.0)),
      cohort::progress_bar({.style = o.progress})};
  if (!o.backup.empty()) callbacks.push_back(cohort::backup_and_restore(o.backup, {.every_steps = o.backup_every}));
  if (!o.checkpoint.empty())
    callbacks.push_back(cohort::model_checkpoint(o.checkpoint, {.every_steps = o.checkpoint_every}));
  if (!o.metrics.empty()) callbacks.push_back(cohort::json_lines_logger(o.metrics, {.every_steps = o.log_every}));
  if (!o.csv.empty()) callbacks.push_back(cohort::csv_logger(o.csv));
  if (!o.tensorboard.empty()) callbacks.push_back(cohort::tensorboard(o.tensorboard, {.update_freq = o.log_every}));

  if (model.is_chief())
    std::printf("fashion_mnist: %s, %s lr %g, %lld train / %lld test examples\n", o.model.c_str(), o.optimizer.c_str(),
                o.lr, (long long)train_size, (long long)test->size());
  const cohort::FitOptions fit_options{
      .epochs = o.epochs, .batch_size = o.batch_size, .validation_data = test.get(), .seed = o.seed, .callbacks = callbacks};
  const cohort::History history =
      train_tensors ? model.fit(*train_tensors, fit_options) : model.fit(*train_records, fit_options);
  if (history.preempted()) {
    if (model.is_chief())
      std::printf("fashion_mnist: preempted at epoch %lld, batch %lld; %s\n", (long long)model.position().epoch + 1,
                  (long long)model.position().batch,
                  o.backup.empty() ? "no --backup: progress since the last checkpoint is lost"
                                   : ("backed up to " + o.backup + ": run the same command to resume").c_str());
    return cohort::kPreemptedExitCode;
  }
  const double accuracy = 100 * history.last().at("val_accuracy");
  if (!o.predictions.empty()) {
    const at::Tensor classes = model.predict(*test).argmax(1);
    if (model.is_chief()) {
      std::ofstream out(o.predictions);
      for (int64_t i = 0; i < classes.size(0); ++i) out << classes[i].item<int64_t>() << '\n';
      COHORT_CHECK_AS(ConfigError, out.good()) << "cannot write " << o.predictions;
    }
  }
  if (model.is_chief()) {
    std::printf("fashion_mnist: final test accuracy %.2f%% after %d epochs\n", accuracy, o.epochs);
    for (const char* metric : {"loss", "accuracy"})
      if (!o.plot.empty())
        cohort::write_history_png(history, o.plot + "-" + metric + ".png", cohort::history_keys(history, metric),
                                  std::string("fashion_mnist ") + metric);
    if (o.dp())
      std::printf("fashion_mnist: privacy spent: epsilon %.4f at delta %g\n", history.last().at("epsilon"), o.dp_delta);
    for (const auto& [flag, path] : {std::pair{"metrics (JSON lines)", o.metrics},
                                     {"checkpoint", o.checkpoint},
                                     {"history (CSV)", o.csv},
                                     {"history (charts)", o.plot.empty() ? "" : o.plot + "-*.png"},
                                     {"TensorBoard logs", o.tensorboard},
                                     {"transform", o.transform},
                                     {"predictions", o.predictions}})
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
    // fit() has told the other ranks why this one stops.
    std::fprintf(stderr, "fashion_mnist: error: %s\n", cohort::flags::one_line_message(e).c_str());
    return dynamic_cast<const cohort::ConfigError*>(&e) ? 2 : 1;
  }
}
