// fit()'s pieces on one device: learning-rate schedules against their
// formulas, the JSON-lines writer, the progress display, the history's CSV,
// and each built-in callback's behaviour in a real fit() (ReduceLROnPlateau's
// rates, ModelCheckpoint's best file, TerminateOnNaN, CsvLogger,
// JsonLinesLogger, LearningRateScheduler, TensorBoard).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numbers>
#include <set>

#include "cohort/common/error.h"
#include "cohort/tensorboard/event_file_name.h"
#include "cohort/tensorboard/event_file_reader.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/csv_logger.h"
#include "cohort/torch/fit/history_plot.h"
#include "cohort/torch/fit/json_lines.h"
#include "cohort/torch/fit/json_lines_logger.h"
#include "cohort/torch/fit/learning_rate_scheduler.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/model_checkpoint.h"
#include "cohort/torch/fit/progress.h"
#include "cohort/torch/fit/reduce_lr_on_plateau.h"
#include "cohort/torch/fit/tensorboard.h"
#include "cohort/torch/fit/terminate_on_nan.h"
#include "cohort/torch/strategy/one_device.h"
#include "tests/engine/json_check.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/torch/fit_events.h"

namespace cohort::testing::fit_callbacks_test {
namespace {

using launcher::testing::read_text;
using launcher::testing::split_lines;
using launcher::testing::TempDir;

TEST(LrSchedules, FollowTheirFormulas) {
  const SchedulePoint at10{.step = 10, .epoch = 2, .steps_per_epoch = 5};
  EXPECT_DOUBLE_EQ(constant_lr(0.3)(at10), 0.3);
  EXPECT_DOUBLE_EQ(step_decay(0.1, 0.5, 2)(at10), 0.1 * 0.5);
  EXPECT_DOUBLE_EQ(exponential_decay(0.1, 0.5, 4)(at10), 0.1 * std::pow(0.5, 2.5));
  EXPECT_DOUBLE_EQ(exponential_decay(0.1, 0.5, 4, true)(at10), 0.1 * 0.25);
  EXPECT_NEAR(cosine_decay(0.1, 40, 0.01)(at10), 0.01 + 0.09 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(cosine_decay(0.1, 40, 0.01)({.step = 400}), 0.01);
  EXPECT_DOUBLE_EQ(polynomial_decay(0.1, 20, 0, 2)(at10), 0.1 * 0.25);
  const LrSchedule pw = piecewise_constant({5, 10}, {1, 2, 3});
  EXPECT_EQ(pw({.step = 4}), 1);
  EXPECT_EQ(pw({.step = 5}), 2);
  EXPECT_EQ(pw({.step = 10}), 3);
  EXPECT_THROW(piecewise_constant({5}, {1}), ConfigError);
  // Warm-up: linear from the initial rate to the schedule's value at its end.
  const LrSchedule w = linear_warmup(constant_lr(0.4), 4, 0.1);
  EXPECT_NEAR(w({.step = 0}), 0.1 + 0.3 / 4, 1e-15);
  EXPECT_NEAR(w({.step = 3}), 0.4, 1e-15);
  EXPECT_DOUBLE_EQ(w({.step = 100}), 0.4);
}

TEST(JsonLines, OneValidObjectPerLineAppendOrStartOver) {
  TempDir dir;
  const std::string path = dir.path() + "/m.jsonl";
  JsonLinesWriter(path, false).write(JsonObject().add("from", "an earlier run"));
  {
    JsonLinesWriter m(path, /*append=*/false);
    m.write(JsonObject().add("event", "step").add("loss", 0.25).add("step", int64_t(3)).add("ok", true));
    m.write(JsonObject().add("name", "quote\" back\\slash\nnewline\x01").add("nan", std::nan("")));
  }
  JsonLinesWriter(path, /*append=*/true).write(JsonObject().add("event", "end"));
  const auto lines = split_lines(read_text(path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], R"({"event":"step","loss":0.25,"step":3,"ok":true})");
  for (const auto& line : lines) {
    std::string error;
    EXPECT_TRUE(JsonCheck::valid(line, &error)) << line << ": " << error;
  }
  EXPECT_NE(lines[1].find(R"("nan":null)"), std::string::npos) << lines[1];
  // Its folder is created; one that cannot be (under a file) is a ConfigError.
  JsonLinesWriter(dir.path() + "/new/folder/m.jsonl", false).write(JsonObject().add("event", "start"));
  EXPECT_EQ(read_text(dir.path() + "/new/folder/m.jsonl"), "{\"event\":\"start\"}\n");
  EXPECT_THROW(JsonLinesWriter(path + "/under/a/file", false), ConfigError);
}

TEST(Progress, DurationsAndPlainLines) {
  EXPECT_EQ(Progress::format_duration(5.4), "5s");
  EXPECT_EQ(Progress::format_duration(65), "1m05s");
  EXPECT_EQ(Progress::format_duration(7265), "2h01m");
  EXPECT_EQ(Progress::format_duration(-1), "?");
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    Progress p(out, ProgressStyle::lines, "[epoch 1/1]", 20, 64);
    for (int i = 1; i <= 20; ++i) p.update(i, 0.5);
    p.finish();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 10) << text;  // a line per tenth
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("[epoch 1/1] step 20/20 (100%)  loss 0.5000"), std::string::npos) << text;
  EXPECT_EQ(parse_progress_style("auto", stdout) == ProgressStyle::bar, bool(::isatty(::fileno(stdout))));
}

TEST(History, CsvAndStateRoundTrip) {
  History h;
  h.add_epoch(0, {{"loss", 0.5}, {"accuracy", 0.75}});
  h.add_epoch(1, {{"loss", 0.25}, {"accuracy", 0.875}, {"val_loss", 0.3}});
  EXPECT_EQ(h.csv(), "epoch,accuracy,loss,val_loss\n1,0.75,0.5,\n2,0.875,0.25,0.3\n");
  CallbackState state;
  h.save(state);
  History back;
  back.load(state);
  EXPECT_EQ(back.csv(), h.csv());
  EXPECT_EQ(back.last().at("val_loss"), 0.3);
}

TEST(History, ChartsThePerEpochValuesAsPng) {
  History h;
  h.add_epoch(0, {{"loss", 0.5}, {"accuracy", 0.75}});
  h.add_epoch(1, {{"loss", 0.25}, {"accuracy", 0.875}, {"val_loss", 0.3}});
  h.add_epoch(2, {{"loss", 0.125}, {"accuracy", 0.9}, {"val_loss", 0.2}});
  EXPECT_EQ(history_keys(h, "loss"), (std::vector<std::string>{"loss", "val_loss"}));
  EXPECT_EQ(history_keys(h, "accuracy"), std::vector<std::string>{"accuracy"});

  const plot::Figure f = history_figure(h, history_keys(h, "loss"), "loss");
  ASSERT_EQ(f.series.size(), 2u);
  EXPECT_EQ(f.series[0].label, "loss");
  EXPECT_EQ(f.series[0].x, (std::vector<double>{1, 2, 3}));  // epochs 1-based, as in the CSV
  EXPECT_EQ(f.x.ticks, (std::vector<double>{1, 2, 3}));       // whole epochs only
  EXPECT_EQ(f.series[0].y, (std::vector<double>{0.5, 0.25, 0.125}));
  EXPECT_TRUE(std::isnan(f.series[1].y[0])) << "no validation at epoch 1: a gap";
  EXPECT_EQ(f.series[1].y[2], 0.2);

  // A PNG of the figure's size: the signature, then IHDR's big-endian width and height.
  TempDir dir;
  const std::string path = dir.path() + "/history_loss.png";
  write_history_png(h, path, {"loss", "val_loss"});
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  EXPECT_EQ(be32(16), uint32_t(f.width));
  EXPECT_EQ(be32(20), uint32_t(f.height));

  EXPECT_THROW(write_history_png(h, path, {"top_5"}), ConfigError);
}

// A one-device model on a small problem, for the callback tests.
struct Problem {
  at::Tensor x = torch::randn({32, 4}, torch::kFloat64);
  at::Tensor y = (x.sum(1) > 0).to(torch::kInt64);
  OneDeviceStrategy strategy;
  std::unique_ptr<Model> model;
  explicit Problem(LossFn loss = [](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); },
                   std::vector<std::shared_ptr<Metric>> metrics = {}) {
    torch::manual_seed(1);
    torch::nn::Sequential net(torch::nn::Linear(4, 2));
    net->to(torch::kFloat64);
    model = std::make_unique<Model>(strategy, net,
                                    ModelOptions{.loss = std::move(loss),
                                                 .optimizer = optimizer_factory<torch::optim::SGD>(
                                                     torch::optim::SGDOptions(0.1)),
                                                 .metrics = std::move(metrics)});
  }
  TensorDataset data() const { return TensorDataset(x, y); }
};

// Records the learning rate of every step and epoch end.
struct LrRecorder : Callback {
  std::string name() const override { return "lr_recorder"; }
  void on_train_batch_begin(Model& m, int64_t, const Logs&) override { steps.push_back(m.learning_rate()); }
  void on_epoch_end(Model& m, int64_t, const Logs&) override { epochs.push_back(m.learning_rate()); }
  std::vector<double> steps, epochs;
};

// A metric whose value at each epoch the test chooses, and the callback
// that tells it which epoch runs (put it first in the list).
struct ChosenMetric {
  explicit ChosenMetric(std::vector<double> v) : values(std::move(v)) {}
  std::shared_ptr<Metric> metric() {
    return make_metric(
        "chosen", 1, [](at::Tensor&, const at::Tensor&, const at::Tensor&) {},
        [this](const at::Tensor&) { return values[size_t(epoch)]; });
  }
  std::shared_ptr<Callback> tracker() {
    struct Tracker : Callback {
      int64_t* epoch;
      explicit Tracker(int64_t* e) : epoch(e) {}
      std::string name() const override { return "tracker"; }
      void on_epoch_begin(Model&, int64_t e, const Logs&) override { *epoch = e; }
    };
    return std::make_shared<Tracker>(&epoch);
  }
  std::vector<double> values;
  int64_t epoch = 0;
};

TEST(Callbacks, LearningRateSchedulerSetsEveryStep) {
  Problem p;
  auto lr = std::make_shared<LrRecorder>();
  p.model->fit(p.data(), {.epochs = 2, .batch_size = 8, .catch_preemption = false,
                          .callbacks = {learning_rate_scheduler(linear_warmup(constant_lr(0.4), 4, 0.0)), lr}});
  ASSERT_EQ(lr->steps.size(), 8u);
  for (size_t s = 0; s < 8; ++s) EXPECT_NEAR(lr->steps[s], s < 4 ? 0.4 * double(s + 1) / 4 : 0.4, 1e-15);
}

TEST(Callbacks, ReduceLrOnPlateauWaitsPatienceThenCutsAndCoolsDown) {
  // Improve, then plateau.
  ChosenMetric chosen({5, 4, 4, 4, 4, 4, 4, 4});
  Problem p([](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); },
            {chosen.metric()});
  auto lr = std::make_shared<LrRecorder>();
  p.model->fit(p.data(),
               {.epochs = 8,
                .batch_size = 32,
                .catch_preemption = false,
                .callbacks = {
                    chosen.tracker(),
                    reduce_lr_on_plateau(
                        {.monitor = "chosen", .mode = Monitor::Mode::min, .factor = 0.5, .patience = 1, .cooldown = 2}),
                    lr}});
  // Keras's rules: epochs 0 and 1 improve; 2 has none for `patience` epochs
  // and cuts; 3 is in cooldown; 4 cuts; 5 cools down; 6 cuts; 7 cools down.
  EXPECT_EQ(lr->epochs, (std::vector<double>{0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125}));
}

TEST(Callbacks, ModelCheckpointBestOnlyWritesALoadableCheckpoint) {
  TempDir dir;
  const std::string path = dir.path() + "/best.ckpt";
  Problem p;
  p.model->fit(p.data(), {.epochs = 3, .batch_size = 8, .catch_preemption = false,
                          .callbacks = {model_checkpoint(path, {.monitor = "loss", .save_best_only = true})}});
  // The loss falls every epoch here, so the best is the last.
  torch::manual_seed(1);
  torch::nn::Sequential fresh(torch::nn::Linear(4, 2));
  fresh->to(torch::kFloat64);
  torch::optim::SGD sgd(fresh->parameters(), 0.1);
  const TrainingState state = load_checkpoint(path, *fresh, sgd);
  EXPECT_EQ(state.epoch, 3);
  EXPECT_EQ(state.step, 12);
  for (size_t i = 0; i < fresh->parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(fresh->parameters()[i], p.model->module().parameters()[i]));
}

TEST(Callbacks, TerminateOnNanStopsAfterTheNextStep) {
  int64_t calls = 0;
  Problem p([&](const at::Tensor& o, const at::Tensor& t) {
    const at::Tensor loss = torch::cross_entropy_loss(o, t);
    return ++calls == 3 ? loss * std::nan("") : loss;
  });
  const History h = p.model->fit(p.data(), {.epochs = 5, .batch_size = 8, .catch_preemption = false,
                                            .vote_interval_s = 0, .callbacks = {terminate_on_nan()}});
  // With a vote every step, the vote that carries the request rides along
  // with step 4.
  EXPECT_EQ(p.model->position().step, 4) << "the NaN came at step 3; one step after it, then the stop";
  EXPECT_EQ(h.epochs().size(), 1u);
}

TEST(Callbacks, CsvAndJsonLinesLoggersRecordTheRun) {
  TempDir dir;
  Problem q([](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); }, {accuracy()});
  const History h = q.model->fit(q.data(), {.epochs = 2, .batch_size = 8, .validation_data = nullptr,
                                            .catch_preemption = false,
                                            .callbacks = {csv_logger(dir.path() + "/h.csv"),
                                                          json_lines_logger(dir.path() + "/m.jsonl",
                                                                            {.every_steps = 2})}});
  EXPECT_EQ(read_text(dir.path() + "/h.csv"), h.csv());
  const auto lines = split_lines(read_text(dir.path() + "/m.jsonl"));
  const FitEvents events = count_fit_events(lines);
  EXPECT_EQ(events.starts, 1);
  EXPECT_EQ(events.steps, 4);  // 8 steps, one line every 2
  EXPECT_EQ(events.epochs, 2);
  EXPECT_EQ(events.ends, 1);
}

// Every scalar of a TensorBoard run directory: tag -> step -> value.
std::map<std::string, std::map<int64_t, double>> tensorboard_run(const std::string& dir) {
  std::map<std::string, std::map<int64_t, double>> run;
  for (const std::string& path : tfevents::list_event_files(dir))
    for (const tfevents::ScalarEvent& s : tfevents::read_event_file(path).scalars) {
      EXPECT_TRUE(run[s.tag].emplace(s.step, s.value).second) << s.tag << " step " << s.step << " twice";
    }
  return run;
}

// The batch-end logs of the steps a summary is due at.
struct BatchLogRecorder : Callback {
  int64_t every;
  explicit BatchLogRecorder(int64_t e) : every(e) {}
  std::string name() const override { return "batch_log_recorder"; }
  void on_train_batch_end(Model& m, int64_t, const Logs& logs) override {
    if (m.position().step % every == 0) at_step[m.position().step] = logs;
  }
  std::map<int64_t, Logs> at_step;
};

// Keras's tags: epoch_<key> per epoch (0-based) in train/, the val_ keys
// without their prefix in validation/, the learning rate and steps per
// second; batch_<key> every update_freq steps at the steps done; values the
// History's (and the batch-end logs') rounded to float32.
TEST(Callbacks, TensorBoardScalarsEqualTheHistory) {
  TempDir dir;
  Problem q([](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); }, {accuracy()});
  const TensorDataset data = q.data();
  auto batches = std::make_shared<BatchLogRecorder>(3);
  const History h = q.model->fit(data, {.epochs = 3,
                                        .batch_size = 8,
                                        .validation_data = &data,
                                        .catch_preemption = false,
                                        .callbacks = {tensorboard(dir.path(), {.update_freq = 3}), batches}});
  ASSERT_EQ(q.model->position().step, 12);
  const auto train = tensorboard_run(dir.path() + "/train");
  const auto validation = tensorboard_run(dir.path() + "/validation");
  EXPECT_EQ(tfevents::list_event_files(dir.path() + "/train").size(), 1u);
  // The step accounting of the one process (rank 0), every epoch: its
  // parts never exceed the step.
  std::set<std::string> train_tags = {"epoch_learning_rate", "epoch_steps_per_second", "batch_steps_per_second",
                                      "rank_0/step_time_ms", "rank_0/compute_ms",      "rank_0/peer_wait_ms",
                                      "rank_0/transfer_ms",  "rank_0/input_ms",        "rank_0/samples_per_second"},
                        validation_tags;
  for (int64_t e = 0; e < 3; ++e) {
    const double step = train.at("rank_0/step_time_ms").at(e);
    EXPECT_GT(step, 0);
    EXPECT_LE(train.at("rank_0/compute_ms").at(e) + train.at("rank_0/input_ms").at(e), step * (1 + 1e-6));
    EXPECT_EQ(train.at("rank_0/peer_wait_ms").at(e), 0) << "one process waits for no peer";
  }
  for (const std::string& key : h.keys()) {
    const bool val = key.starts_with("val_");
    const std::string tag = "epoch_" + (val ? key.substr(4) : key);
    (val ? validation_tags : train_tags).insert(tag);
    const auto& steps = (val ? validation : train).at(tag);
    ASSERT_EQ(steps.size(), 3u) << tag;
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(steps.at(e), double(float(h.values(key)[size_t(e)]))) << key << e;
  }
  for (const auto& [step, logs] : batches->at_step)
    for (const auto& [key, value] : logs) {
      train_tags.insert("batch_" + key);
      EXPECT_EQ(train.at("batch_" + key).at(step), double(float(value))) << key << " at step " << step;
    }
  EXPECT_EQ(batches->at_step.size(), 4u);
  std::set<std::string> got_train, got_validation;
  for (const auto& [tag, steps] : train) got_train.insert(tag);
  for (const auto& [tag, steps] : validation) got_validation.insert(tag);
  EXPECT_EQ(got_train, train_tags);
  EXPECT_EQ(got_validation, validation_tags);
  EXPECT_TRUE(validation_tags.count("epoch_loss") && validation_tags.count("epoch_accuracy"));
  for (const auto& [tag, steps] : train) {
    if (tag.starts_with("batch_")) {
      std::vector<int64_t> at;
      for (const auto& [step, value] : steps) at.push_back(step);
      EXPECT_EQ(at, (std::vector<int64_t>{3, 6, 9, 12})) << tag;
    }
  }
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(train.at("epoch_learning_rate").at(e), double(float(0.1)));
    EXPECT_GT(train.at("epoch_steps_per_second").at(e), 0);
  }
  EXPECT_THROW(tensorboard(""), ConfigError);
  EXPECT_THROW(tensorboard(dir.path(), {.update_freq = -1}), ConfigError);
}

TEST(Fit, BadOptionsAreConfigErrors) {
  Problem p;
  EXPECT_THROW(p.model->fit(p.data(), {.batch_size = 0}), ConfigError);
  EXPECT_THROW(p.model->fit(p.data(), {.epochs = -1}), ConfigError);
  EXPECT_THROW(p.model->fit(p.data(), {.validation_freq = 0}), ConfigError);
  EXPECT_THROW(TensorDataset(torch::zeros({3, 2}), torch::zeros({4})), ConfigError);
}

TEST(Callbacks, ModelCheckpointBestOnlyKeepsTheBestWhenTheMonitorWorsens) {
  // Smaller is better: it improves at epochs 0, 1 and 3 and worsens at 2 and 4.
  ChosenMetric chosen({5, 3, 4, 2, 6});
  Problem p([](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); },
            {chosen.metric()});
  // After ModelCheckpoint's epoch end (callbacks run in order): the model's
  // weights at each epoch's end, and what the file holds then.
  struct FileReader : Callback {
    std::string path;
    std::vector<std::vector<at::Tensor>> weights, saved;
    std::vector<int64_t> saved_epoch;
    explicit FileReader(std::string p) : path(std::move(p)) {}
    std::string name() const override { return "file_reader"; }
    void on_epoch_end(Model& m, int64_t, const Logs&) override {
      std::vector<at::Tensor> now;
      for (const auto& t : m.module().parameters()) now.push_back(t.detach().clone());
      weights.push_back(now);
      torch::nn::Sequential fresh(torch::nn::Linear(4, 2));
      fresh->to(torch::kFloat64);
      torch::optim::SGD sgd(fresh->parameters(), 0.1);
      saved_epoch.push_back(load_checkpoint(path, *fresh, sgd).epoch);
      std::vector<at::Tensor> in_file;
      for (const auto& t : fresh->parameters()) in_file.push_back(t.detach().clone());
      saved.push_back(in_file);
    }
  };
  TempDir dir;
  auto reader = std::make_shared<FileReader>(dir.path() + "/best.ckpt");
  p.model->fit(
      p.data(),
      {.epochs = 5,
       .batch_size = 8,
       .catch_preemption = false,
       .callbacks = {
           chosen.tracker(),
           model_checkpoint(reader->path, {.monitor = "chosen", .mode = Monitor::Mode::min, .save_best_only = true}),
           reader}});
  // The file's epoch counts completed epochs: rewritten after epochs 0, 1
  // and 3 (improvements), left alone after 2 and 4 (worse).
  EXPECT_EQ(reader->saved_epoch, (std::vector<int64_t>{1, 2, 2, 4, 4}));
  const std::vector<size_t> best_so_far = {0, 1, 1, 3, 3};
  ASSERT_EQ(reader->weights.size(), 5u);
  ASSERT_EQ(reader->saved.size(), 5u);
  for (size_t e = 0; e < 5; ++e) {
    const auto& best = reader->weights[best_so_far[e]];
    ASSERT_EQ(reader->saved[e].size(), best.size());
    ASSERT_FALSE(best.empty());
    for (size_t i = 0; i < best.size(); ++i)
      EXPECT_TRUE(torch::equal(reader->saved[e][i], best[i])) << "after epoch " << e << ", parameter " << i;
  }
  // Training moved the weights after the best epoch, so a file rewritten at
  // a worse epoch would differ from the best epoch's weights.
  EXPECT_FALSE(torch::equal(reader->weights[4][0], reader->weights[3][0]));
  EXPECT_FALSE(torch::equal(reader->weights[2][0], reader->weights[1][0]));
}

}  // namespace
}  // namespace cohort::testing::fit_callbacks_test
