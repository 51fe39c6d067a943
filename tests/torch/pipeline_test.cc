// Pipeline: gradients equal single-process training of the same model on the
// same batch (GPipe and 1F1B, 1-4 stages, several micro-batch counts,
// recomputation), the forward-only path, dp x pp through a Mesh, the 1F1B
// memory bound on the stats counters, and clear errors on every rank (never
// a hang) for stages that do not fit together or disagree.
#include "cohort/torch/model_parallel/pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cohort/torch/model_parallel/activation_channel.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::pipeline_test {
namespace {

using testing::max_relative_difference;
using testing::PerRank;
using testing::run_world_ranks;
using testing::run_world_ranks_collect;
using testing::WorldRank;

constexpr int64_t kVocab = 11, kDim = 8, kSeq = 3;

// A char-LM-shaped model in float64: token ids -> embedding -> MLP -> logits.
torch::nn::Sequential make_model(uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential m(torch::nn::Embedding(kVocab, kDim), torch::nn::Linear(kDim, 2 * kDim),
                            torch::nn::Tanh(), torch::nn::Linear(2 * kDim, kDim), torch::nn::Tanh(),
                            torch::nn::Linear(kDim, kDim), torch::nn::Tanh(), torch::nn::Linear(kDim, kVocab));
  m->to(at::kDouble);
  return m;
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), target.reshape({-1}));
}

struct Batch {
  at::Tensor input, target;
};

Batch make_batch(int64_t rows, uint64_t seed) {
  torch::manual_seed(seed);
  return {at::randint(kVocab, {rows, kSeq}, at::kLong), at::randint(kVocab, {rows, kSeq}, at::kLong)};
}

// Single-process reference: one backward of the whole batch's mean loss.
std::vector<at::Tensor> reference_grads(torch::nn::Sequential model, const Batch& b, double* loss) {
  model->zero_grad();
  at::Tensor l = lm_loss(model->forward(b.input), b.target);
  l.backward();
  if (loss) *loss = l.item<double>();
  std::vector<at::Tensor> g;
  for (auto& p : model->parameters()) g.push_back(p.grad().clone());
  return g;
}

using Case = std::tuple<Schedule, int /*stages*/, int /*micro-batches*/, bool /*recompute*/>;

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& [schedule, stages, m, recompute] = info.param;
  return std::string(schedule == Schedule::gpipe ? "gpipe" : "f1b") + "_p" + std::to_string(stages) + "_m" +
         std::to_string(m) + (recompute ? "_recompute" : "");
}

class PipelineGradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineGradientTest, EqualsSingleProcessTraining) {
  const auto [schedule, stages, m, recompute] = GetParam();
  auto model = make_model(7);
  auto reference = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  const Batch batch = make_batch(10, 3);  // 10 rows: uneven micro-batches for m = 3, 4, 7
  double ref_loss = 0;
  const auto ref = reference_grads(torch::nn::Sequential(reference), batch, &ref_loss);
  const auto bounds = partition_sequential(model, stages);

  PerRank<double> losses(stages), worst(stages);
  PerRank<int> live(stages), compared(stages);
  run_world_ranks(stages, [&](WorldRank& w) {
    auto stage = stage_of(model, bounds, w.rank);
    Pipeline pipe(stage, w.world, {.micro_batches = m, .schedule = schedule, .recompute_activations = recompute});
    const bool first = pipe.is_first(), last = pipe.is_last();
    const at::Tensor loss = pipe.train_step(first ? batch.input : at::Tensor(), last ? batch.target : at::Tensor(),
                                            lm_loss);
    losses.add(w.rank, loss.item<double>());
    // This stage's parameters are model parameters [first_param, ...).
    double max_rel = 0;
    for (const auto& p : stage->parameters()) {
      const auto all = model->parameters();
      const size_t k = size_t(std::find_if(all.begin(), all.end(), [&](const at::Tensor& q) { return q.is_same(p); }) -
                              all.begin());
      max_rel = std::max(max_rel, max_relative_difference(p.grad(), ref[k]));
    }
    worst.add(w.rank, max_rel);
    compared.add(w.rank, int(stage->parameters().size()));
    live.add(w.rank, pipe.stats().peak_live_micro_batches);
  });
  int total = 0;
  for (int s = 0; s < stages; ++s) total += compared.of(s).at(0);
  EXPECT_EQ(total, int(model->parameters().size())) << "every parameter is compared once";
  for (int s = 0; s < stages; ++s) {
    EXPECT_NEAR(losses.of(s).at(0), ref_loss, 1e-12 * std::abs(ref_loss)) << "stage " << s;
    EXPECT_LT(worst.of(s).at(0), 1e-9) << "stage " << s;
    const int bound = schedule == Schedule::gpipe ? m : std::min(m, stages - s);
    EXPECT_EQ(live.of(s).at(0), bound) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineGradientTest,
    ::testing::Values(Case{Schedule::gpipe, 1, 2, false}, Case{Schedule::gpipe, 2, 1, false},
                      Case{Schedule::gpipe, 2, 4, false}, Case{Schedule::gpipe, 3, 3, false},
                      Case{Schedule::gpipe, 4, 7, false}, Case{Schedule::one_f_one_b, 2, 1, false},
                      Case{Schedule::one_f_one_b, 2, 4, false}, Case{Schedule::one_f_one_b, 3, 2, false},
                      Case{Schedule::one_f_one_b, 3, 5, false}, Case{Schedule::one_f_one_b, 4, 3, false},
                      Case{Schedule::one_f_one_b, 4, 8, false}, Case{Schedule::one_f_one_b, 3, 4, true},
                      Case{Schedule::gpipe, 2, 3, true}),
    case_name);

TEST(PipelineTest, FloatModelWithinTheIssueTolerance) {
  // float32 as users train: equal to single-process within 1e-5 relative.
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 16),
                                torch::nn::ReLU(), torch::nn::Linear(16, 1));
  auto reference = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  const at::Tensor x = at::randn({16, 6}), y = at::randn({16, 1});
  auto mse = [](const at::Tensor& out, const at::Tensor& t) { return torch::mse_loss(out, t); };
  mse(reference->forward(x), y).backward();
  const auto bounds = partition_sequential(model, 2);
  PerRank<double> worst(2);
  run_world_ranks(2, [&](WorldRank& w) {
    auto stage = stage_of(model, bounds, w.rank);
    Pipeline pipe(stage, w.world, {.micro_batches = 4});
    pipe.train_step(x, y, mse);
    double max_rel = 0;
    const auto all = model->parameters();
    const auto ref = reference->parameters();
    for (const auto& p : stage->parameters())
      for (size_t k = 0; k < all.size(); ++k)
        if (all[k].is_same(p))
          max_rel = std::max(max_rel, max_relative_difference(p.grad().to(at::kDouble), ref[k].grad().to(at::kDouble),
                                                              1e-4));
    worst.add(w.rank, max_rel);
  });
  for (int s = 0; s < 2; ++s) EXPECT_LT(worst.of(s).at(0), 1e-5) << "stage " << s;
}

TEST(PipelineTest, RecomputationReplaysDropoutMasks) {
  // One stage with dropout: the recomputed forward must draw the same mask,
  // so gradients equal those of a run without recomputation from the same
  // generator state.
  auto grads_with = [](bool recompute) {
    torch::manual_seed(11);
    torch::nn::Sequential model(torch::nn::Linear(5, 32), torch::nn::Dropout(0.5), torch::nn::Linear(32, 1));
    model->to(at::kDouble);
    const at::Tensor x = at::randn({6, 5}, at::kDouble), y = at::randn({6, 1}, at::kDouble);
    std::vector<at::Tensor> out;
    run_world_ranks(1, [&](WorldRank& w) {
      torch::manual_seed(12);
      Pipeline pipe(model, w.world, {.micro_batches = 3, .recompute_activations = recompute});
      pipe.train_step(x, y, [](const at::Tensor& o, const at::Tensor& t) { return torch::mse_loss(o, t); });
    });
    for (auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = grads_with(false), recomputed = grads_with(true);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::allclose(plain[i], recomputed[i], 1e-12, 1e-12)) << i;
}

TEST(PipelineTest, ForwardReturnsTheModelOutputOnEveryStage) {
  auto model = make_model(9);
  const Batch batch = make_batch(5, 4);
  at::Tensor want;
  {
    torch::NoGradGuard no_grad;
    want = model->forward(batch.input);
  }
  const auto bounds = partition_sequential(model, 3);
  PerRank<double> diff(3);
  run_world_ranks(3, [&](WorldRank& w) {
    Pipeline pipe(stage_of(model, bounds, w.rank), w.world, {.micro_batches = 8});  // capped at 5 rows
    const at::Tensor out = pipe.forward(w.rank == 0 ? batch.input : at::Tensor());
    diff.add(w.rank, out.sizes() == want.sizes() ? (out - want).abs().max().item<double>() : 1e9);
  });
  for (int s = 0; s < 3; ++s) EXPECT_LT(diff.of(s).at(0), 1e-12) << "stage " << s;
}

TEST(PipelineTest, DataTimesPipelineParallelEqualsSingleProcess) {
  // World 4 as dp=2 x pp=2: each dp replica trains on half the batch through
  // a 2-stage 1F1B pipeline, gradients averaged over dp, SGD steps. After two
  // steps every replica's parameters equal single-process SGD on the whole
  // batch.
  const MeshShape shape{.dp = 2, .pp = 2, .tp = 1};
  auto base = make_model(21);
  auto reference = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(base->clone());
  std::vector<torch::nn::Sequential> replicas;
  for (int d = 0; d < 2; ++d)
    replicas.emplace_back(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(base->clone()));
  const std::vector<Batch> batches{make_batch(8, 31), make_batch(8, 32)};
  const double lr = 0.5;
  {
    torch::optim::SGD sgd(reference->parameters(), lr);
    for (const auto& b : batches) {
      sgd.zero_grad();
      lm_loss(reference->forward(b.input), b.target).backward();
      sgd.step();
    }
  }
  const auto bounds = partition_sequential(base, 2);
  PerRank<double> worst(4);
  run_world_ranks(4, [&](WorldRank& w) {
    MeshOptions mo;
    mo.engine = testing::engine_test_options();
    Mesh mesh(shape, w.world, w.store, mo);
    const int d = mesh.rank(MeshAxis::dp);
    auto stage = stage_of(replicas[size_t(d)], bounds, mesh.rank(MeshAxis::pp));
    Pipeline pipe(stage, mesh.comm(MeshAxis::pp), {.micro_batches = 2});
    torch::optim::SGD sgd(stage->parameters(), lr);
    for (const auto& b : batches) {
      sgd.zero_grad();
      const at::Tensor x = b.input.narrow(0, 4 * d, 4), y = b.target.narrow(0, 4 * d, 4);
      pipe.train_step(pipe.is_first() ? x : at::Tensor(), pipe.is_last() ? y : at::Tensor(), lm_loss);
      synchronize_gradients(stage->parameters(), mesh.engine(MeshAxis::dp));
      sgd.step();
    }
    double max_rel = 0;
    const auto mine = replicas[size_t(d)]->parameters();
    const auto ref = reference->parameters();
    for (const auto& p : stage->parameters())
      for (size_t k = 0; k < mine.size(); ++k)
        if (mine[k].is_same(p)) max_rel = std::max(max_rel, max_relative_difference(p.detach(), ref[k].detach()));
    worst.add(w.rank, max_rel);
  });
  for (int r = 0; r < 4; ++r) EXPECT_LT(worst.of(r).at(0), 1e-10) << "rank " << r;
}

TEST(PipelineTest, ActivationMemoryOfOneFOneBIsBoundedByTheStageCount) {
  // m = 8 over 4 stages: 1F1B holds at most 4 - s micro-batches on stage s,
  // GPipe all 8; the byte counters follow.
  auto model = make_model(2);
  const Batch batch = make_batch(16, 5);
  const auto bounds = partition_sequential(model, 4);
  PerRank<Pipeline::Stats> stats(4);
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    run_world_ranks(4, [&](WorldRank& w) {
      Pipeline pipe(stage_of(model, bounds, w.rank), w.world, {.micro_batches = 8, .schedule = schedule});
      for (int step = 0; step < 2; ++step)
        pipe.train_step(pipe.is_first() ? batch.input : at::Tensor(), pipe.is_last() ? batch.target : at::Tensor(),
                        lm_loss);
      stats.add(w.rank, pipe.stats());
    });
  for (int s = 0; s < 4; ++s) {
    const Pipeline::Stats& gpipe = stats.of(s).at(0);
    const Pipeline::Stats& f1b = stats.of(s).at(1);
    EXPECT_EQ(gpipe.peak_live_micro_batches, 8) << "stage " << s;
    EXPECT_EQ(f1b.peak_live_micro_batches, 4 - s) << "stage " << s;
    EXPECT_LE(f1b.peak_live_micro_batches, 4);
    EXPECT_EQ(gpipe.steps, 2);
    // Equal micro-batches: bytes scale with the live count.
    EXPECT_EQ(f1b.peak_activation_bytes * 8, gpipe.peak_activation_bytes * size_t(4 - s)) << "stage " << s;
    EXPECT_GT(f1b.peak_activation_bytes, 0u);
  }
}

TEST(PipelineTest, LargeActivationsFlowBothWaysWithoutDeadlock) {
  // Messages of 1 MiB, far beyond what a backend buffers, so every send
  // blocks until its receiver takes it: the schedules must still complete.
  // Stage s computes x * w_s; the closed form of d mean(prod) / d w_s is
  // mean(x * prod_{k != s} w_k).
  constexpr int kStages = 3;
  const at::Tensor x = at::randn({8, 32768}, at::kFloat);  // 4 rows = 512 KiB per micro-batch at m = 2, 1 MiB at m = 1
  const std::vector<double> w{0.5, -2.0, 1.5};
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int m : {1, 2, 4}) {
      PerRank<double> grad(kStages);
      run_world_ranks(kStages, [&](WorldRank& r) {
        auto weight = at::full({}, w[size_t(r.rank)], at::kDouble).requires_grad_(true);
        Pipeline pipe([&](const at::Tensor& in) { return in * weight; }, r.world,
                      {.micro_batches = m, .schedule = schedule});
        pipe.train_step(r.rank == 0 ? x : at::Tensor(), at::zeros({8}),
                        [](const at::Tensor& out, const at::Tensor&) { return out.mean(); });
        grad.add(r.rank, weight.grad().item<double>());
      });
      const double mean_x = x.to(at::kDouble).mean().item<double>();
      for (int s = 0; s < kStages; ++s) {
        double others = 1;
        for (int k = 0; k < kStages; ++k)
          if (k != s) others *= w[size_t(k)];
        EXPECT_NEAR(grad.of(s).at(0), mean_x * others, 1e-5 * std::abs(mean_x * others) + 1e-9)
            << schedule_name(schedule) << " m=" << m << " stage " << s;
      }
    }
}

// Every rank ended with an exception; returns their messages.
std::vector<std::string> all_failed(const std::vector<std::exception_ptr>& errors) {
  std::vector<std::string> out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) {
      ADD_FAILURE() << "rank " << r << " finished without an error";
      out.push_back("");
      continue;
    }
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      out.push_back(e.what());
    }
  }
  return out;
}

TEST(PipelineTest, StagesThatDoNotFitFailOnEveryRankNamingTheStages) {
  // Stage 1 expects 5 features, stage 0 produces 6; stage 2 waits behind it.
  torch::manual_seed(1);
  std::vector<torch::nn::Linear> stages{torch::nn::Linear(4, 6), torch::nn::Linear(5, 3),
                                          torch::nn::Linear(3, 1)};
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    const auto errors = run_world_ranks_collect(3, [&](WorldRank& w) {
      Pipeline pipe(stages[size_t(w.rank)], w.world, {.micro_batches = 2, .schedule = schedule});
      pipe.train_step(at::randn({4, 4}), at::randn({4, 1}),
                      [](const at::Tensor& o, const at::Tensor& t) { return torch::mse_loss(o, t); });
    });
    const auto what = all_failed(errors);
    ASSERT_EQ(what.size(), 3u);
    EXPECT_NE(what[1].find("pipeline stage 1 of 3 failed on micro-batch 0"), std::string::npos) << what[1];
    EXPECT_NE(what[1].find("from pipeline stage 0 of 3"), std::string::npos) << what[1];
    EXPECT_NE(what[1].find("[2, 6]"), std::string::npos) << what[1];
    try {
      std::rethrow_exception(errors[1]);
    } catch (const MismatchError&) {
    } catch (...) {
      ADD_FAILURE() << "stage 1's error is not a MismatchError";
    }
  }
}

TEST(ActivationChannelTest, CarriesShapeAndDtypeAndRefusesWhatTheReceiverDoesNotExpect) {
  PerRank<std::string> got(2);
  const auto errors = run_world_ranks_collect(2, [&](WorldRank& w) {
    comm::Communicator& c = *w.world;
    if (w.rank == 0) {
      send_tensor(c, 1, at::arange(6, at::kDouble).reshape({2, 3}),
                  {.kind = MessageKind::gradient, .micro_batch = 0, .micro_batches = 2});
      send_tensor(c, 1, at::ones({2, 3}, at::kFloat),
                  {.kind = MessageKind::gradient, .micro_batch = 1, .micro_batches = 2});
      c.barrier();  // rank 1 fails before: the abort reaches this rank here
    } else {
      MessageExpectation e{.kind = MessageKind::gradient, .micro_batch = 0, .micro_batches = 2,
                           .dtype = at::kDouble, .shape = std::vector<int64_t>{2, 3}, .self = "stage 1",
                           .peer = "stage 0"};
      const at::Tensor t = recv_tensor(c, 0, e);
      got.add(1, t.equal(at::arange(6, at::kDouble).reshape({2, 3})) ? "equal" : "differs");
      e.micro_batch = 1;
      e.shape = std::vector<int64_t>{2, 4};
      e.dtype = at::kFloat;
      recv_tensor(c, 0, e);
    }
  });
  EXPECT_EQ(got.of(1), std::vector<std::string>{"equal"});
  const auto what = all_failed(errors);
  EXPECT_NE(what[1].find("stage 1 receiving the gradient of micro-batch 1 from stage 0: expected shape [2, 4], "
                         "stage 0 sent shape [2, 3]"),
            std::string::npos)
      << what[1];
}

TEST(PipelineTest, NonFloatActivationIsAClearError) {
  std::vector<StageFn> fns{[](const at::Tensor& x) { return x.to(at::kLong); },
                           [](const at::Tensor& x) { return x.to(at::kFloat); }};
  const auto errors = run_world_ranks_collect(2, [&](WorldRank& w) {
    Pipeline pipe(fns[size_t(w.rank)], w.world, {.micro_batches = 1});
    pipe.train_step(at::randn({2, 3}), at::randn({2, 3}),
                    [](const at::Tensor& o, const at::Tensor& t) { return torch::mse_loss(o, t); });
  });
  const auto what = all_failed(errors);
  EXPECT_NE(what[0].find("pipeline stage 0 of 2 returned shape [2, 3] Long"), std::string::npos) << what[0];
}

TEST(PipelineTest, StagesThatDisagreeOnOptionsAreAConfigErrorOnEveryRank) {
  const auto errors = run_world_ranks_collect(2, [&](WorldRank& w) {
    Pipeline pipe([](const at::Tensor& x) { return x; }, w.world, {.micro_batches = 2 + w.rank});
  });
  for (const auto& what : all_failed(errors))
    EXPECT_NE(what.find("pipeline stages disagree on their options"), std::string::npos) << what;
}

TEST(PipelineTest, BatchAndTargetErrors) {
  auto id = [](const at::Tensor& x) { return x * 1.0; };
  auto mse = [](const at::Tensor& o, const at::Tensor& t) { return torch::mse_loss(o, t); };
  // Fewer rows than micro-batches: the same ConfigError on both stages.
  auto errors = run_world_ranks_collect(2, [&](WorldRank& w) {
    Pipeline pipe(id, w.world, {.micro_batches = 4});
    pipe.train_step(at::randn({3, 2}), at::randn({3, 2}), mse);
  });
  for (const auto& what : all_failed(errors))
    EXPECT_NE(what.find("a batch of 3 rows cannot be split into 4 micro-batches"), std::string::npos) << what;
  // A target whose rows differ from the input's.
  errors = run_world_ranks_collect(2, [&](WorldRank& w) {
    Pipeline pipe(id, w.world, {.micro_batches = 2});
    pipe.train_step(at::randn({4, 2}), at::randn({5, 2}), mse);
  });
  const auto what = all_failed(errors);
  EXPECT_NE(what[1].find("the target has 5 rows, the input on the first stage 4"), std::string::npos) << what[1];
}

TEST(StagePartitionTest, BalancesContiguousStages) {
  EXPECT_EQ(balanced_partition({1, 1, 1, 1}, 2), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(balanced_partition({10, 1, 1, 1, 1, 1, 1}, 2), (std::vector<int>{0, 1, 7}));
  EXPECT_EQ(balanced_partition({1, 2, 3, 4, 5, 6}, 3), (std::vector<int>{0, 3, 5, 6}));  // 6 | 9 | 6
  EXPECT_EQ(balanced_partition({0, 0, 0}, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THROW(balanced_partition({1, 1}, 3), ConfigError);
  EXPECT_THROW(balanced_partition({1, 1}, 0), ConfigError);

  auto model = make_model(1);
  const auto by_params = partition_sequential(model, 2);
  ASSERT_EQ(by_params.size(), 3u);
  // Stages' parameter counts: no other split has a smaller maximum.
  auto stage_params = [&](int s) {
    int64_t n = 0;
    for (auto& p : stage_of(model, by_params, s)->parameters()) n += p.numel();
    return n;
  };
  EXPECT_EQ(stage_params(0) + stage_params(1), [&] {
    int64_t n = 0;
    for (auto& p : model->parameters()) n += p.numel();
    return n;
  }());
  const auto by_time = partition_sequential(
      model, 3, {.by = PartitionBy::time, .sample_input = make_batch(4, 1).input, .timing_runs = 2});
  EXPECT_EQ(by_time.front(), 0);
  EXPECT_EQ(by_time.back(), int(model->size()));
  EXPECT_THROW(stage_of(model, by_params, 2), ConfigError);
}

}  // namespace
}  // namespace cohort::pipeline_test
