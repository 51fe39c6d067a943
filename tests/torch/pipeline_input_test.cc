// cohort's input pipeline feeding fit() (cohort/torch/data/pipeline_input.h)
// through the strategies: every sample once per epoch at 1-4 processes; the
// parameters equal the one-process run whatever the process and worker
// counts (the global batches and the per-sample augmentation are the
// same); a BackupAndRestore backup taken mid-epoch on 2 processes resumes
// on 3 and on 1 with every remaining sample read once and the parameters of
// the uninterrupted run. Ranks are threads with their own engines.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "cohort/common/error.h"
#include "cohort/data/mean_variance.h"
#include "cohort/data/source.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data/pipeline_input.h"
#include "cohort/torch/fit/backup_and_restore.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "tests/data/temp_dir.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::pipeline_input_test {
namespace {

namespace nn = torch::nn;
constexpr int64_t kIn = 4, kClasses = 3;

// Sample i: x = [i, noise...] (f64), label = i % 3. x[0] names the sample
// in what the model is given.
std::shared_ptr<const data::Source> make_source(int64_t n) {
  auto g = at::detail::createCPUGenerator(5);
  const at::Tensor noise = at::randn({n, kIn}, g, torch::kFloat64);
  std::vector<data::Sample> samples;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> x(noise[i].data_ptr<double>(), noise[i].data_ptr<double>() + kIn);
    x[0] = double(i);
    data::Sample s{.index = uint64_t(i)};
    s.features.set("x", data::Feature::of(x));
    s.features.set("label", data::Feature::scalar<int64_t>(i % kClasses));
    samples.push_back(std::move(s));
  }
  return std::make_shared<data::MemorySource>(std::move(samples));
}

// An augmentation that draws from the sample's generator: x[1..] += noise.
void jitter(data::Sample& s, data::SampleRng& rng) {
  auto x = s["x"].values<double>();
  for (size_t k = 1; k < x.size(); ++k) x[k] += 0.1 * rng.normal();
}

nn::Sequential make_net() {
  return seeded(7, [] {  // ranks are threads: seeding and drawing at once (torch_ranks.h)
    nn::Sequential net(nn::Linear(kIn, 8), nn::Tanh(), nn::Linear(8, kClasses));
    net->to(torch::kFloat64);
    return net;
  });
}

// A model whose input is x with x[0] (the sample's number) zeroed, so
// that the network learns from the noise only.
ModelOptions model_options() {
  return {.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); },
          .optimizer = optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))};
}

// The stream fit() reads, recording the samples of each batch it hands out.
class Recording final : public BatchStream {
 public:
  Recording(PipelineInput& inner, std::vector<std::pair<int64_t, int64_t>>* seen) : inner_(inner), seen_(seen) {}
  int64_t size() const override { return inner_.size(); }
  int64_t start_epoch(const InputContext& context, int64_t epoch, int64_t done, const std::string& resume) override {
    epoch_ = epoch;
    return inner_.start_epoch(context, epoch, done, resume);
  }
  int64_t next_rows() const override { return inner_.next_rows(); }
  Batch next() override {
    Batch b = inner_.next();
    for (int64_t r = 0; r < b.rows(); ++r) seen_->emplace_back(epoch_, int64_t(b.input[r][0].item<double>()));
    if (b.rows() > 0) b.input = b.input.index_fill(1, torch::tensor({int64_t(0)}), 0.0);
    return b;
  }
  std::string state() const override { return inner_.state(); }

 private:
  PipelineInput& inner_;
  std::vector<std::pair<int64_t, int64_t>>* seen_;
  int64_t epoch_ = 0;
};

at::Tensor flat_parameters(Model& model) {
  std::vector<at::Tensor> p;
  for (const auto& t : model.module().parameters()) p.push_back(t.detach().flatten());
  return torch::cat(p).clone();
}

struct RunResult {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> seen;  // per rank: (epoch, sample)
  at::Tensor parameters;                                       // rank 0's
};

// Thrown by StopAfter to end a run the way a killed job ends: no clean
// shutdown of fit(), the backup of that step on disk.
struct Interrupted {};

class StopAfter final : public Callback {
 public:
  explicit StopAfter(int64_t step) : step_(step) {}
  std::string name() const override { return "stop_after"; }
  void on_train_batch_end(Model& model, int64_t, const Logs&) override {
    if (model.position().step == step_) throw Interrupted{};
  }

 private:
  int64_t step_;
};

struct RunOptions {
  int ranks = 1;
  int workers = 1;
  int64_t n = 29;
  int64_t batch = 12;
  int64_t epochs = 2;
  std::string backup;        // a BackupAndRestore directory, every step
  int64_t interrupt_at = 0;  // > 0: stop (as if killed) after this global step
};

RunResult run(const RunOptions& o) {
  RunResult result;
  result.seen.resize(size_t(o.ranks));
  const auto source = make_source(o.n);
  std::mutex mu;
  run_torch_ranks(o.ranks, [&](int rank, int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    Model model(strategy, make_net(), model_options());
    PipelineInput input(source, {.input = "x",
                                 .target = "label",
                                 .pipeline = {.order = {.seed = 11}, .workers = o.workers, .prefetch = 2}});
    input.map(jitter);
    Recording recording(input, &result.seen[size_t(rank)]);
    FitOptions fit{.epochs = o.epochs, .batch_size = o.batch, .catch_preemption = false};
    if (!o.backup.empty()) fit.callbacks.push_back(backup_and_restore(o.backup, {.every_steps = 1}));
    if (o.interrupt_at > 0) fit.callbacks.push_back(std::make_shared<StopAfter>(o.interrupt_at));
    try {
      model.fit(recording, fit);
    } catch (const Interrupted&) {
    }
    if (rank == 0) {
      std::lock_guard lock(mu);
      result.parameters = flat_parameters(model);
    }
  });
  return result;
}

// (epoch, sample) -> times read, over every rank.
std::map<std::pair<int64_t, int64_t>, int> counts(const std::vector<RunResult>& runs) {
  std::map<std::pair<int64_t, int64_t>, int> c;
  for (const auto& r : runs)
    for (const auto& rank : r.seen)
      for (const auto& key : rank) ++c[key];
  return c;
}

void expect_each_once(const std::map<std::pair<int64_t, int64_t>, int>& c, int64_t n, int64_t epochs,
                      const std::string& what) {
  EXPECT_EQ(int64_t(c.size()), n * epochs) << what;
  for (const auto& [key, times] : c)
    EXPECT_EQ(times, 1) << what << ": epoch " << key.first << " sample " << key.second;
}

double max_difference(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(PipelineInput, FitReadsEverySampleOncePerEpochAndTrainsAsOneProcessAtOneToFourRanks) {
  const RunResult one = run({.ranks = 1, .workers = 1});
  expect_each_once(counts({one}), 29, 2, "1 rank");
  for (const int ranks : {2, 3, 4}) {
    const RunResult got = run({.ranks = ranks, .workers = ranks == 3 ? 3 : 2});
    const std::string what = std::to_string(ranks) + " ranks";
    expect_each_once(counts({got}), 29, 2, what);
    // The same global batches, the same augmentation: the same training
    // up to the order of the gradient sums.
    EXPECT_LT(max_difference(got.parameters, one.parameters), 1e-10) << what;
  }
}

TEST(PipelineInput, BackupMidEpochResumesOnAnotherProcessCountExactlyOnce) {
  // 29 samples, global batch 6: 5 steps per epoch. The 2-process job stops
  // after global step 7 (epoch 1, its 3rd batch), as if killed, with that
  // step's backup on disk; the resumed job finishes on 3 processes (and, in
  // a second round, on 1).
  const RunResult whole = run({.ranks = 1, .batch = 6});
  for (const int resume_ranks : {3, 1}) {
    TempDir dir;
    const std::string backup = dir.path() + "/backup";
    const RunResult first = run({.ranks = 2, .batch = 6, .backup = backup, .interrupt_at = 7});
    ASSERT_TRUE(std::filesystem::exists(backup_path(backup)));
    const RunResult rest = run({.ranks = resume_ranks, .workers = 2, .batch = 6, .backup = backup});
    const std::string what = "resumed on " + std::to_string(resume_ranks);
    expect_each_once(counts({first, rest}), 29, 2, what);
    EXPECT_LT(max_difference(rest.parameters, whole.parameters), 1e-10) << what;
    EXPECT_FALSE(std::filesystem::exists(backup_path(backup))) << "a finished fit removes its backup";
  }
}

TEST(PipelineInput, AnalyzersMergeOverAStrategyToTheFloat64Reference) {
  // Each process adds every 3rd value; after the merge over the strategy's
  // processes every one holds the statistics of all values.
  std::vector<double> values;
  for (int i = 0; i < 1001; ++i) values.push_back(1e6 + std::sin(double(i)) * 100.0);
  double mean = 0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  double m2 = 0;
  for (double v : values) m2 += (v - mean) * (v - mean);
  PerRank<std::pair<double, double>> got(3);
  run_torch_ranks(3, [&](int rank, int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    data::MeanVariance mv;
    for (size_t i = size_t(rank); i < values.size(); i += 3) mv.add(values[i]);
    mv.merge_across(allgather_over(strategy));
    got.add(rank, {mv.mean(), mv.variance()});
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NEAR(got.of(r).at(0).first, mean, 1e-9 * mean) << "rank " << r;
    EXPECT_NEAR(got.of(r).at(0).second, m2 / double(values.size()), 1e-9 * m2 / double(values.size())) << "rank " << r;
    EXPECT_EQ(got.of(r).at(0), got.of(0).at(0)) << "every rank holds the same bits";
  }
}

TEST(PipelineInput, ConfigErrorsNameTheProblem) {
  const auto source = make_source(10);
  EXPECT_THROW(PipelineInput(source, {.pipeline = {.out_of_order_window = 2}}), ConfigError);
  std::string message;
  run_torch_ranks(2, [&](int rank, int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    Model model(strategy, make_net(), model_options());
    PipelineInput input(source, {.input = "x", .target = "label"});
    try {
      model.fit(input, {.epochs = 1, .batch_size = 5, .catch_preemption = false});
    } catch (const ConfigError& e) {
      if (rank == 0) message = e.what();
    }
  });
  EXPECT_NE(message.find("global batch (5) must be a multiple of the 2 processes"), std::string::npos) << message;
  // A feature that is still a byte string cannot become a tensor.
  data::Sample s;
  s.features.set("raw", data::Feature::bytes({"ab"}));
  EXPECT_THROW(feature_tensor(s["raw"], nullptr, "raw"), ConfigError);
}

}  // namespace
}  // namespace cohort::testing::pipeline_input_test
