// fit()'s parts on their own, and what a user of fit() sees:
// - StepVote without a world: simulated processes in one thread sum their
//   votes; every process reads the same decisions at the same steps, a stop
//   or preemption request lands when the protocol says, the cadence follows
//   the chief's step time, unknown rows are summed every step;
// - CallbackList: null callbacks and two stateful callbacks under one name
//   are refused; predict() runs the predict hooks;
// - loggers create their folders; EarlyStopping's reason reaches the
//   History and the JSON lines' end; validation through a stream equals
//   validation on the data set;
// - a rank that trains a step with no rows of a non-empty global batch is
//   warned about once; an exception that escapes one rank's fit() fails the
//   other rank's with its message (Strategy::abort), not a timeout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/torch/data/dataset_stream.h"
#include "cohort/torch/fit/csv_logger.h"
#include "cohort/torch/fit/early_stopping.h"
#include "cohort/torch/fit/json_lines_logger.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/step_vote.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/torch/fit_events.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::fit_parts_test {
namespace {

using launcher::testing::read_text;
using launcher::testing::split_lines;
using launcher::testing::TempDir;

// --- StepVote over simulated processes.

// The sum of each round of votes over `n` processes (threads): process p's
// k-th cast joins round k, and a round's sum is read once all n cast it.
class SimulatedSum {
 public:
  explicit SimulatedSum(int n) : n_(n), casts_(size_t(n)) {}
  StepVote::AllSumAsync process(int p) {
    return [this, p](const at::Tensor& values) {
      size_t round = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        round = casts_[size_t(p)]++;
        if (rounds_.size() <= round) rounds_.resize(round + 1);
        rounds_[round].push_back(values.clone());
      }
      cast_.notify_all();
      return TensorHandle({.name = "vote", .finish = [this, round] {
                             std::unique_lock<std::mutex> lock(mutex_);
                             const bool all = cast_.wait_for(lock, std::chrono::seconds(10),
                                                             [&] { return int(rounds_[round].size()) == n_; });
                             if (!all) throw std::logic_error("a process never cast its vote");
                             at::Tensor sum = at::zeros_like(rounds_[round].front());
                             for (const auto& v : rounds_[round]) sum += v;
                             return sum;
                           }});
    };
  }

 private:
  int n_;
  std::mutex mutex_;
  std::condition_variable cast_;
  std::vector<size_t> casts_;
  std::vector<std::vector<at::Tensor>> rounds_;
};

struct VoteRun {
  std::vector<std::map<int64_t, StepVote::Decision>> decisions;  // per process: step -> decision
  std::vector<int64_t> ended_at;                                 // per process: the step it stopped before (-1: none)
};

// `n` processes (threads) run up to `steps` steps, voting as fit() does;
// `requests(p, step)` says what process p asks for when it casts at
// `step` (a request made during step k - 1 is seen from step k's cast on);
// `my_rows(p, step)` its rows (rows unknown). Each process's clock advances
// `step_s` per step.
VoteRun run_votes(int n, int64_t steps, StepVoteOptions options,
                  const std::function<StepVote::Requests(int, int64_t)>& requests,
                  const std::function<int64_t(int, int64_t)>& my_rows = {}, double step_s = 0.01) {
  SimulatedSum sum(n);
  VoteRun run;
  run.decisions.resize(size_t(n));
  run.ended_at.assign(size_t(n), -1);
  std::vector<std::thread> processes;
  for (int p = 0; p < n; ++p) {
    processes.emplace_back([&, p] {
      auto now = std::chrono::steady_clock::time_point();
      StepVoteOptions o = options;
      o.is_chief = p == 0;
      StepVote vote(sum.process(p), o, [&now] { return now; });
      vote.start(0, requests(p, 0));
      for (int64_t step = 0; step < steps; ++step) {
        if (const auto d = vote.before_step(step, my_rows ? my_rows(p, step) : 0, requests(p, step))) {
          run.decisions[size_t(p)][step] = *d;
          if (d->stop || d->preempt) {
            run.ended_at[size_t(p)] = step;
            break;
          }
        }
        vote.step_starts(step, requests(p, step));
        now += std::chrono::microseconds(int64_t(step_s * 1e6));
      }
      vote.finish();
    });
  }
  for (auto& t : processes) t.join();
  return run;
}

TEST(StepVote, EveryStepVotesAtIntervalZeroAndARequestLandsAStepLater) {
  // Process 2's request is there when step 5 starts (made during step 4):
  // the vote cast as step 5 starts carries it, and step 6 reads it, on
  // every process: steps 0-5 run.
  const VoteRun run = run_votes(3, 20, {.rows_known = true, .interval_s = 0},
                                [](int p, int64_t step) { return StepVote::Requests{.stop = p == 2 && step >= 5}; });
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(run.ended_at[p], 6) << p;
    EXPECT_EQ(run.decisions[p].size(), 7u) << "a vote before every step at interval 0";
    EXPECT_TRUE(run.decisions[p].at(6).stop);
    EXPECT_FALSE(run.decisions[p].at(5).stop);
  }
}

TEST(StepVote, TheCadenceFollowsTheChiefsStepTimeAndIsTheSameEverywhere) {
  // 10 ms steps and 50 ms between votes: after the first measured step,
  // votes are 5 steps apart. The first two votes know no step time yet.
  const VoteRun run =
      run_votes(2, 30, {.rows_known = true, .interval_s = 0.05}, [](int, int64_t) { return StepVote::Requests{}; });
  EXPECT_EQ(run.ended_at, (std::vector<int64_t>{-1, -1}));
  std::vector<int64_t> steps;
  for (const auto& [step, d] : run.decisions[0]) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 7, 12, 17, 22, 27}));
  EXPECT_EQ(run.decisions[1].size(), run.decisions[0].size()) << "the other process reads the same votes";
  for (const auto& [step, d] : run.decisions[0]) EXPECT_TRUE(run.decisions[1].count(step)) << step;
  EXPECT_EQ(StepVote::steps_between_votes(0.2, 1e-9), StepVote::kMaxStepsBetweenVotes);
  EXPECT_EQ(StepVote::steps_between_votes(0.2, 0), 1);
}

TEST(StepVote, APreemptionEndsEveryProcessAtTheSameStep) {
  // A request made while a vote is in flight waits for the next vote.
  const VoteRun run = run_votes(2, 40, {.rows_known = true, .interval_s = 0.05},
                                [](int p, int64_t step) { return StepVote::Requests{.preempt = p == 0 && step >= 8}; });
  // Votes read at 0, 1, 2, 7, 12: the one cast as step 12 starts (the
  // first cast after the request) is read at step 17.
  EXPECT_EQ(run.ended_at, (std::vector<int64_t>{17, 17}));
  for (const auto& decisions : run.decisions) EXPECT_TRUE(decisions.at(17).preempt);
}

TEST(StepVote, RowsUnknownAreSummedBeforeEveryStep) {
  const VoteRun run = run_votes(
      3, 6, {.rows_known = false, .interval_s = 1}, [](int, int64_t) { return StepVote::Requests{}; },
      [](int p, int64_t step) { return step < 4 ? p + 1 : (p == 0 ? 1 : 0); });
  for (const auto& decisions : run.decisions) {
    ASSERT_EQ(decisions.size(), 6u);
    for (int64_t step = 0; step < 6; ++step) EXPECT_EQ(decisions.at(step).global_rows, step < 4 ? 6 : 1) << step;
  }
}

// --- fit() on one device.

struct SmallProblem {
  at::Tensor x, y;
  OneDeviceStrategy strategy;
  std::unique_ptr<Model> model;
  SmallProblem() {
    torch::manual_seed(3);  // every problem the same: data and weights
    x = torch::randn({48, 4}, torch::kFloat64);
    y = (x.sum(1) > 0).to(torch::kInt64);
    torch::nn::Sequential net(torch::nn::Linear(4, 2));
    net->to(torch::kFloat64);
    // A loss module and an optimizer's options, as the guide writes them.
    model = std::make_unique<Model>(strategy, net,
                                    ModelOptions{.loss = torch::nn::CrossEntropyLoss(),
                                                 .optimizer = torch::optim::SGDOptions(0.1),
                                                 .metrics = {accuracy()}});
  }
  TensorDataset data() const { return TensorDataset(x, y); }
};

struct Counting : Callback {
  explicit Counting(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void save_state(CallbackState& state) const override { state["calls"] = {double(calls)}; }
  void on_predict_begin(Model&, const Logs&) override { ++predict_begin; }
  void on_predict_batch_end(Model&, int64_t, const Logs&) override { ++predict_batches; }
  void on_predict_end(Model&, const Logs& logs) override {
    ++predict_end;
    predicted_rows = logs.at("rows");
  }
  std::string name_;
  int calls = 0, predict_begin = 0, predict_batches = 0, predict_end = 0;
  double predicted_rows = 0;
};

TEST(CallbackList, RefusesNullCallbacksAndStatefulNamesTwice) {
  SmallProblem p;
  const std::string null = error_of_kind<ConfigError>([&] {
    p.model->fit(p.data(), {.callbacks = {std::make_shared<Counting>("a"), nullptr}});
  });
  EXPECT_NE(null.find("fit: callback 2 is null"), std::string::npos) << null;
  const std::string twice = error_of_kind<ConfigError>([&] {
    p.model->fit(p.data(), {.callbacks = {std::make_shared<Counting>("same"), std::make_shared<Counting>("same")}});
  });
  EXPECT_NE(twice.find("two callbacks that keep state are both named 'same'"), std::string::npos) << twice;
  EXPECT_NE(error_of_kind<ConfigError>([&] {
              p.model->fit(p.data(), {.callbacks = {early_stopping({}), early_stopping({})}});
            }).find("'early_stopping'"),
            std::string::npos);
}

TEST(CallbackList, PredictRunsThePredictHooks) {
  SmallProblem p;
  auto counting = std::make_shared<Counting>("counting");
  const at::Tensor out = p.model->predict(p.data(), {.batch_size = 20, .callbacks = {counting}});
  EXPECT_EQ(out.size(0), 48);
  EXPECT_EQ(counting->predict_begin, 1);
  EXPECT_EQ(counting->predict_batches, 3);  // 20 + 20 + 8 rows
  EXPECT_EQ(counting->predict_end, 1);
  EXPECT_EQ(counting->predicted_rows, 48);
}

TEST(Fit, LoggersCreateTheirFolders) {
  TempDir dir;
  SmallProblem p;
  const std::string jsonl = dir.path() + "/runs/a/metrics.jsonl", csv = dir.path() + "/runs/b/c/history.csv";
  p.model->fit(p.data(), {.epochs = 2,
                          .batch_size = 16,
                          .catch_preemption = false,
                          .callbacks = {json_lines_logger(jsonl), csv_logger(csv)}});
  const FitEvents events = count_fit_events(split_lines(read_text(jsonl)));
  EXPECT_EQ(events.epochs, 2);
  EXPECT_EQ(events.ends, 1);
  EXPECT_EQ(read_text(csv), p.model->history().csv());
}

TEST(Fit, EarlyStoppingsReasonIsInTheHistoryAndTheJsonLines) {
  TempDir dir;
  SmallProblem p;
  const std::string jsonl = dir.path() + "/m.jsonl";
  // No epoch improves on the first by more than min_delta: the stop comes
  // after epoch 2 (patience 1, never at epoch 1).
  const History h = p.model->fit(
      p.data(),
      {.epochs = 10,
       .batch_size = 16,
       .catch_preemption = false,
       .callbacks = {early_stopping({.monitor = "loss", .min_delta = 1e9, .patience = 1}), json_lines_logger(jsonl)}});
  EXPECT_EQ(h.epochs().size(), 2u);
  EXPECT_NE(h.stop_reason().find("EarlyStopping: loss has not improved for 1 epoch"), std::string::npos)
      << h.stop_reason();
  const std::vector<std::string> lines = split_lines(read_text(jsonl));
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("\"event\":\"end\""), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("\"stopped_early\":\"EarlyStopping: loss has not improved"), std::string::npos)
      << lines.back();
  // A run that goes to its end has no reason.
  SmallProblem q;
  EXPECT_EQ(q.model->fit(q.data(), {.epochs = 2, .batch_size = 16, .catch_preemption = false}).stop_reason(), "");
}

TEST(Fit, ValidatesOnAStreamAsOnTheDataSet) {
  SmallProblem a, b;
  const TensorDataset val(a.x.narrow(0, 0, 20), a.y.narrow(0, 0, 20));
  const int64_t no_step = 0;
  DatasetStream stream(val, /*shuffle=*/false, 0, nullptr, no_step);
  const History on_data = a.model->fit(
      a.data(),
      {.epochs = 2, .batch_size = 16, .validation_data = &val, .validation_batch_size = 7, .catch_preemption = false});
  const History on_stream = b.model->fit(b.data(), {.epochs = 2,
                                                    .batch_size = 16,
                                                    .validation_data = &stream,
                                                    .validation_batch_size = 7,
                                                    .catch_preemption = false});
  for (const char* key : {"val_loss", "val_accuracy"}) {
    ASSERT_EQ(on_data.values(key).size(), 2u) << key;
    for (size_t e = 0; e < 2; ++e) EXPECT_NEAR(on_stream.values(key)[e], on_data.values(key)[e], 1e-12) << key;
  }
  // Batches of 5 or of all 20 rows: the same loss up to the sums' order.
  EXPECT_NEAR(b.model->evaluate(stream, {.batch_size = 5}).at("loss"), a.model->evaluate(val).at("loss"), 1e-12);
}

// --- Two ranks as threads.

TEST(Fit, AStepWithNoRowsOnARankIsWarnedAboutOnce) {
  ::testing::internal::CaptureStderr();
  run_torch_ranks(2, [](int rank, int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    torch::manual_seed(0);
    torch::nn::Sequential net(torch::nn::Linear(4, 2));
    strategy.prepare(training_model(net, cross_entropy, torch::optim::SGDOptions(0.1)));
    // Rank 1's loop ran past its shard: 8 global rows, all rank 0's.
    const at::Tensor x = torch::randn({8, 4});
    const at::Tensor y = torch::zeros({8}, torch::kInt64);
    for (int step = 0; step < 3; ++step) strategy.train_step(rank == 0 ? Batch{x, y} : Batch{}, 8);
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  size_t warnings = 0;
  for (size_t at = err.find("trained a step with no rows"); at != std::string::npos;
       at = err.find("trained a step with no rows", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << err;
  EXPECT_NE(err.find("process 1 of 2 trained a step with no rows, though the global batch has 8"), std::string::npos)
      << err;
}

TEST(Fit, AnExceptionThatEscapesOneRanksFitFailsTheOthersWithItsReason) {
  struct Boom : Callback {
    std::string name() const override { return "boom"; }
    void on_train_batch_end(Model& model, int64_t batch, const Logs&) override {
      if (batch == 2 && !model.is_chief()) throw std::runtime_error("boom at batch 2");
    }
  };
  const std::vector<std::string> errors = run_torch_ranks_errors<std::exception>(2, [](int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    torch::manual_seed(0);
    torch::nn::Sequential net(torch::nn::Linear(4, 2));
    Model model(strategy, net, {.loss = cross_entropy, .optimizer = torch::optim::SGDOptions(0.1)});
    const at::Tensor x = torch::randn({64, 4});
    model.fit(TensorDataset(x, (x.sum(1) > 0).to(torch::kInt64)), {.epochs = 4,
                                                                   .batch_size = 8,
                                                                   .catch_preemption = false,
                                                                   .vote_interval_s = 0,
                                                                   .callbacks = {std::make_shared<Boom>()}});
  });
  EXPECT_EQ(errors[1], "boom at batch 2");
  EXPECT_NE(errors[0].find("boom at batch 2"), std::string::npos) << "rank 0 learns why rank 1 stopped: " << errors[0];
}

}  // namespace
}  // namespace cohort::testing::fit_parts_test
