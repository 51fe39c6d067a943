// DistributedDataParallel against single-process training on the
// concatenated batch (the independent reference), for world sizes 1..3 run
// as threads: SGD and Adam, no_sync accumulation, unused parameters,
// gradient_as_bucket_view, rebuilt buckets; and its errors.
#include "cohort/torch/data_parallel/distributed_data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "cohort/common/error.h"
#include "cohort/torch/core/zero_grad.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::distributed_data_parallel_test {
namespace {

namespace nn = torch::nn;
using cohort::testing::PerRank;
using cohort::testing::run_torch_ranks;

// Registered fc3, fc1, fc2 (and `extra`, last) but used fc1 -> fc2 -> fc3:
// gradients arrive in an order different from reverse registration, so the
// rebuilt buckets differ from the initial ones.
struct NetImpl : nn::Module {
  explicit NetImpl(int hidden = 6, bool use_extra = true) : use_extra(use_extra) {
    fc3 = register_module("fc3", nn::Linear(hidden, 3));
    fc1 = register_module("fc1", nn::Linear(4, hidden));
    fc2 = register_module("fc2", nn::Linear(hidden, hidden));
    extra = register_module("extra", nn::Linear(4, 3));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = fc3(torch::tanh(fc2(torch::relu(fc1(x)))));
    return use_extra ? y + extra(x) : y;
  }
  bool use_extra;
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, extra{nullptr};
};
TORCH_MODULE(Net);

void copy_into(nn::Module& dst, const std::vector<at::Tensor>& values) {
  torch::NoGradGuard no_grad;
  auto params = dst.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
}

struct TrainSetup {
  int world = 2;
  int steps = 3;
  int micro = 1;  // micro-batches per step; all but the last under no_sync
  bool adam = false;
  bool use_extra = true;
  bool set_to_none = false;  // zero_grad drops .grad() (PyTorch 2's default)
  DistributedDataParallelOptions ddp;
};

void zero_grad(torch::optim::Optimizer& opt, bool set_to_none) {
  if (set_to_none)
    zero_grad_to_none(opt);
  else
    opt.zero_grad();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net, bool adam) {
  if (adam) return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

constexpr int64_t kBatch = 5;  // per rank and micro-batch

// Every rank's final parameters bitwise equal to rank 0's and to the
// reference's within float32 rounding.
void expect_ranks_equal_reference(const PerRank<std::vector<at::Tensor>>& finals, int world,
                                  const std::vector<at::Tensor>& expected) {
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(finals.of(r).size(), 1u);
    EXPECT_TRUE(cohort::testing::bitwise_equal(finals.of(r)[0], finals.of(0)[0])) << "rank " << r;
    const auto& got = finals.of(r)[0];
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(cohort::testing::max_relative_difference(got[i].to(at::kDouble), expected[i].to(at::kDouble), 1e-3),
                1e-4)
          << "rank " << r << " parameter " << i;
  }
}

// Trains on every rank with DDP; returns rank 0's final parameters and checks
// all ranks end bitwise identical. The reference trains one model on all
// ranks' micro-batches of a step at once, with the same effective loss.
void expect_matches_reference(const TrainSetup& s) {
  torch::manual_seed(7);
  Net init(6, s.use_extra);
  const auto initial = cohort::testing::copy_parameters(*init);
  const int64_t per_step = int64_t(s.world) * s.micro * kBatch;
  at::Tensor xs = at::randn({s.steps, per_step, 4}, at::kFloat);
  at::Tensor ys = at::randn({s.steps, per_step, 3}, at::kFloat);

  // Reference: mean over ranks of the sum over micro-batches of each
  // micro-batch's mean loss = micro x the mean loss of the whole step.
  Net ref(6, s.use_extra);
  copy_into(*ref, initial);
  auto ref_opt = make_optimizer(ref, s.adam);
  for (int k = 0; k < s.steps; ++k) {
    ref_opt->zero_grad();
    (double(s.micro) * torch::mse_loss(ref(xs[k]), ys[k])).backward();
    ref_opt->step();
  }

  PerRank<std::vector<at::Tensor>> finals(s.world);
  PerRank<int> rebuilt(s.world);
  run_torch_ranks(s.world, [&](int rank, int size) {
    Net net(6, s.use_extra);
    if (rank == 0) copy_into(*net, initial);  // other ranks get rank 0's at construction
    DistributedDataParallel<Net> ddp(net, s.ddp);
    auto before = ddp.reducer().bucket_indices();
    auto opt = make_optimizer(net, s.adam);
    for (int k = 0; k < s.steps; ++k) {
      zero_grad(*opt, s.set_to_none);
      for (int m = 0; m < s.micro; ++m) {
        // Rank r's m-th micro-batch: rows [(r * micro + m) * kBatch, +kBatch).
        const int64_t row = (int64_t(rank) * s.micro + m) * kBatch;
        at::Tensor x = xs[k].narrow(0, row, kBatch), y = ys[k].narrow(0, row, kBatch);
        if (m + 1 < s.micro) {
          auto guard = ddp.no_sync();
          torch::mse_loss(ddp(x), y).backward();
        } else {
          torch::mse_loss(ddp(x), y).backward();
        }
      }
      opt->step();
    }
    (void)size;
    finals.add(rank, cohort::testing::copy_parameters(*net));
    rebuilt.add(rank, ddp.reducer().buckets_rebuilt() && ddp.reducer().bucket_indices() != before ? 1 : 0);
  });
  expect_ranks_equal_reference(finals, s.world, cohort::testing::copy_parameters(*ref));
  for (int r = 0; r < s.world; ++r) {
    if (s.steps >= 2) {
      EXPECT_EQ(rebuilt.of(r)[0], 1) << "buckets not rebuilt in arrival order on rank " << r;
    }
  }
}

DistributedDataParallelOptions small_buckets() {
  DistributedDataParallelOptions o;
  o.first_bucket_bytes = 64;  // several buckets for this tiny model
  o.bucket_bytes = 160;
  return o;
}

class DdpWorld : public ::testing::TestWithParam<int> {};

TEST_P(DdpWorld, SgdMatchesSingleProcess) {
  TrainSetup s;
  s.world = GetParam();
  s.ddp = small_buckets();
  expect_matches_reference(s);
}

TEST_P(DdpWorld, AdamWithBucketViewMatchesSingleProcess) {
  TrainSetup s;
  s.world = GetParam();
  s.adam = true;
  s.ddp = small_buckets();
  s.ddp.gradient_as_bucket_view = true;
  expect_matches_reference(s);
}

TEST_P(DdpWorld, NoSyncAccumulationMatchesSingleProcess) {
  TrainSetup s;
  s.world = GetParam();
  s.micro = 3;
  s.ddp = small_buckets();
  expect_matches_reference(s);
}

TEST_P(DdpWorld, NoSyncWithBucketViewMatchesSingleProcess) {
  TrainSetup s;
  s.world = GetParam();
  s.micro = 2;
  s.adam = true;
  s.ddp = small_buckets();
  s.ddp.gradient_as_bucket_view = true;
  expect_matches_reference(s);
}

TEST_P(DdpWorld, UnusedParametersWithFindUnused) {
  TrainSetup s;
  s.world = GetParam();
  s.use_extra = false;
  s.ddp = small_buckets();
  s.ddp.find_unused_parameters = true;
  expect_matches_reference(s);
  s.adam = true;
  s.ddp.gradient_as_bucket_view = true;
  expect_matches_reference(s);
}

// Caps below every parameter's size: each parameter is a bucket of its own,
// reduced in place in its .grad() whenever autograd allocated that .grad()
// (zero_grad to none), with and without bucket views, accumulating or not.
TEST_P(DdpWorld, OneParameterBucketsReduceTheGradientInPlace) {
  TrainSetup s;
  s.world = GetParam();
  s.set_to_none = true;
  s.ddp.first_bucket_bytes = 8;
  s.ddp.bucket_bytes = 8;
  expect_matches_reference(s);
  s.adam = true;
  s.ddp.gradient_as_bucket_view = true;
  expect_matches_reference(s);
  s.micro = 2;
  expect_matches_reference(s);
  s.set_to_none = false;
  expect_matches_reference(s);
}

TEST_P(DdpWorld, DefaultBucketsMatchSingleProcess) {
  TrainSetup s;
  s.world = GetParam();
  s.steps = 2;
  expect_matches_reference(s);  // one 1 MiB bucket
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpWorld, ::testing::Values(1, 2, 3));

// COHORT_AUTOTUNE with DDP: the bucket cap joins the engine's search, driven
// by DDP's steps. Every rank builds its buckets with the cap rank 0's tuner
// chose, at the same step; the gradients stay the average (against one
// process on the concatenated batch) while the caps change under them; once
// converged the cap stays and the per-step broadcast of the cap stops.
void expect_tuned_ddp_exact(bool bucket_view) {
  SCOPED_TRACE(bucket_view ? "gradient_as_bucket_view" : "gradients copied");
  constexpr int kWorld = 2, kSteps = 70, kHidden = 512;  // fc2.weight: 1 MiB, the grid's smallest cap
  torch::manual_seed(7);
  Net init(kHidden);
  const auto initial = cohort::testing::copy_parameters(*init);
  at::Tensor xs = at::randn({kSteps, kWorld * kBatch, 4}, at::kFloat);
  at::Tensor ys = at::randn({kSteps, kWorld * kBatch, 3}, at::kFloat);
  Net ref(kHidden);
  copy_into(*ref, initial);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.01));  // stays finite over 70 steps
  for (int k = 0; k < kSteps; ++k) {
    ref_opt.zero_grad();
    torch::mse_loss(ref(xs[k]), ys[k]).backward();
    ref_opt.step();
  }

  PerRank<std::vector<at::Tensor>> finals(kWorld);
  PerRank<std::vector<int64_t>> caps(kWorld);
  PerRank<std::vector<int64_t>> extra_ops(kWorld);  // per step: ops beyond one per bucket
  run_torch_ranks(kWorld, [&](int rank, int) {
    Net net(kHidden);
    if (rank == 0) copy_into(*net, initial);
    DistributedDataParallelOptions o;
    o.gradient_as_bucket_view = bucket_view;  // rebuilt buckets then take .grad() over
    DistributedDataParallel<Net> ddp(net, o);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
    std::vector<int64_t> my_caps, my_extra;
    for (int k = 0; k < kSteps; ++k) {
      const uint64_t ops_before = ddp.engine().stats().ops_completed;
      opt.zero_grad();
      at::Tensor x = xs[k].narrow(0, rank * kBatch, kBatch), y = ys[k].narrow(0, rank * kBatch, kBatch);
      torch::mse_loss(ddp(x), y).backward();
      opt.step();
      my_caps.push_back(ddp.reducer().bucket_bytes());
      const auto buckets = int64_t(ddp.reducer().bucket_indices().size());
      my_extra.push_back(int64_t(ddp.engine().stats().ops_completed - ops_before) - buckets);
    }
    finals.add(rank, cohort::testing::copy_parameters(*net));
    caps.add(rank, my_caps);
    extra_ops.add(rank, my_extra);
  }, cohort::testing::autotune_test_options());
  expect_ranks_equal_reference(finals, kWorld, cohort::testing::copy_parameters(*ref));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(caps.of(r)[0], caps.of(0)[0]) << "rank " << r << " built other buckets than rank 0";
    // Step 1 is the first with a step mark (after the first synchronised
    // backward; it also rebuilds the buckets in arrival order); from then on
    // one broadcast per step while the search runs, none once it has
    // converged (at most 61 marks: the search's bound, autotune_test.cc).
    const auto& extra = extra_ops.of(r)[0];
    EXPECT_EQ(extra[2], 1) << "rank " << r;
    EXPECT_EQ(extra.back(), 0) << "rank " << r << ": still tuning after " << kSteps << " steps";
  }
  const auto& c = caps.of(0)[0];
  EXPECT_GT(std::set<int64_t>(c.begin(), c.end()).size(), 1u) << "the tuner tried no other cap";
}

TEST(DdpAutotune, EveryRankTakesRankZerosBucketCapAndTrainingStaysExact) {
  expect_tuned_ddp_exact(false);
  expect_tuned_ddp_exact(true);
}

TEST(DdpAutotune, AnEvaluationForwardOnOneRankMakesNoCollective) {
  // Mid-search, after the last training step, rank 0 alone evaluates (no
  // grad): were the cap's broadcast made there, rank 0 would wait for a
  // partner that has finished (and fail when it shuts down).
  run_torch_ranks(2, [&](int rank, int) {
    torch::manual_seed(3);
    Net net(8);
    DistributedDataParallel<Net> ddp(net);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
    for (int k = 0; k < 6; ++k) {
      opt.zero_grad();
      torch::mse_loss(ddp(at::ones({kBatch, 4})), at::zeros({kBatch, 3})).backward();
      opt.step();
    }
    if (rank == 0) {
      torch::NoGradGuard no_grad;
      EXPECT_EQ(ddp(at::ones({1, 4})).size(0), 1);
    }
  }, cohort::testing::autotune_test_options());
}

// The case find_unused_parameters exists for: a module only some ranks use
// (rank 0 here). Reference: one model where `extra` applies to rank 0's rows.
TEST(DdpUnused, ParameterUsedOnOneRankOnly) {
  constexpr int kWorld = 2, kSteps = 2;
  torch::manual_seed(9);
  Net init;
  const auto initial = cohort::testing::copy_parameters(*init);
  at::Tensor xs = at::randn({kSteps, kWorld * kBatch, 4}), ys = at::randn({kSteps, kWorld * kBatch, 3});
  Net ref(6, /*use_extra=*/false);
  copy_into(*ref, initial);
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int k = 0; k < kSteps; ++k) {
    ref_opt.zero_grad();
    at::Tensor out = ref(xs[k]);
    at::Tensor first = out.narrow(0, 0, kBatch) + ref->extra(xs[k].narrow(0, 0, kBatch));
    torch::mse_loss(at::cat({first, out.narrow(0, kBatch, kBatch)}), ys[k]).backward();
    ref_opt.step();
  }
  PerRank<std::vector<at::Tensor>> finals(kWorld);
  run_torch_ranks(kWorld, [&](int rank, int) {
    Net net(6, /*use_extra=*/rank == 0);
    if (rank == 0) copy_into(*net, initial);
    DistributedDataParallelOptions o = small_buckets();
    o.find_unused_parameters = true;
    DistributedDataParallel<Net> ddp(net, o);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int k = 0; k < kSteps; ++k) {
      opt.zero_grad();
      at::Tensor x = xs[k].narrow(0, rank * kBatch, kBatch), y = ys[k].narrow(0, rank * kBatch, kBatch);
      torch::mse_loss(ddp(x), y).backward();
      opt.step();
    }
    finals.add(rank, cohort::testing::copy_parameters(*net));
  });
  const auto expected = cohort::testing::copy_parameters(*ref);
  for (int r = 0; r < kWorld; ++r) {
    const auto& got = finals.of(r)[0];
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(cohort::testing::max_relative_difference(got[i].to(at::kDouble), expected[i].to(at::kDouble), 1e-3),
                1e-4)
          << "rank " << r << " parameter " << i;
  }
  // extra did train (from rank 0's half of the batch).
  EXPECT_FALSE(at::equal(finals.of(1)[0].back(), initial.back()));
}

// A parameter no rank uses keeps an undefined .grad(), as in PyTorch, so the
// optimizer skips it: with weight decay it would otherwise shrink. Both with
// and without bucket views; the used parameters still train as the reference.
TEST(DdpUnused, ParameterUnusedEverywhereKeepsNoGradient) {
  for (const bool bucket_view : {false, true}) {
    constexpr int kWorld = 2, kSteps = 2;
    torch::manual_seed(11);
    Net init;
    const auto initial = cohort::testing::copy_parameters(*init);
    at::Tensor xs = at::randn({kSteps, kWorld * kBatch, 4}), ys = at::randn({kSteps, kWorld * kBatch, 3});
    const auto sgd = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.1);
    Net ref(6, /*use_extra=*/false);
    copy_into(*ref, initial);
    torch::optim::SGD ref_opt(ref->parameters(), sgd);
    for (int k = 0; k < kSteps; ++k) {
      ref_opt.zero_grad();
      torch::mse_loss(ref(xs[k]), ys[k]).backward();
      ref_opt.step();
    }
    PerRank<std::vector<at::Tensor>> finals(kWorld);
    PerRank<int> extra_grad_defined(kWorld);
    run_torch_ranks(kWorld, [&](int rank, int) {
      Net net(6, /*use_extra=*/false);
      if (rank == 0) copy_into(*net, initial);
      DistributedDataParallelOptions o = small_buckets();
      o.find_unused_parameters = true;
      o.gradient_as_bucket_view = bucket_view;
      DistributedDataParallel<Net> ddp(net, o);
      torch::optim::SGD opt(net->parameters(), sgd);
      for (int k = 0; k < kSteps; ++k) {
        opt.zero_grad();
        at::Tensor x = xs[k].narrow(0, rank * kBatch, kBatch), y = ys[k].narrow(0, rank * kBatch, kBatch);
        torch::mse_loss(ddp(x), y).backward();
        extra_grad_defined.add(rank, net->extra->weight.grad().defined() || net->extra->bias.grad().defined());
        opt.step();
      }
      finals.add(rank, cohort::testing::copy_parameters(*net));
    });
    const auto expected = cohort::testing::copy_parameters(*ref);
    for (int r = 0; r < kWorld; ++r) {
      for (int defined : extra_grad_defined.of(r)) EXPECT_EQ(defined, 0) << "rank " << r << " view " << bucket_view;
      const auto& got = finals.of(r)[0];
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(cohort::testing::max_relative_difference(got[i].to(at::kDouble), expected[i].to(at::kDouble), 1e-3),
                  1e-4)
            << "rank " << r << " parameter " << i << " view " << bucket_view;
    }
  }
}

// A gradient accumulated under no_sync counts as use: rank 0 uses `extra`
// in a no_sync pass, no rank in the synchronised pass; both ranks must then
// hold the same reduced .grad() (not rank 0 alone), and stay identical.
TEST(DdpUnused, GradientFromANoSyncPassCountsAsUse) {
  PerRank<std::vector<at::Tensor>> finals(2);
  PerRank<int> defined(2);
  run_torch_ranks(2, [&](int rank, int) {
    torch::manual_seed(13);
    Net net(6, /*use_extra=*/rank == 0);
    DistributedDataParallelOptions o = small_buckets();
    o.find_unused_parameters = true;
    DistributedDataParallel<Net> ddp(net, o);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).weight_decay(0.1));
    at::Tensor x = at::randn({kBatch, 4}), y = at::randn({kBatch, 3});
    {
      auto guard = ddp.no_sync();
      torch::mse_loss(ddp(x), y).backward();
    }
    net->use_extra = false;
    torch::mse_loss(ddp(x), y).backward();
    defined.add(rank, net->extra->weight.grad().defined() ? 1 : 0);
    opt.step();
    finals.add(rank, cohort::testing::copy_parameters(*net));
  });
  EXPECT_EQ(defined.of(0)[0], 1);
  EXPECT_EQ(defined.of(1)[0], 1);
  EXPECT_TRUE(cohort::testing::bitwise_equal(finals.of(0)[0], finals.of(1)[0]));
}

TEST(DdpBuckets, AssignBucketsCapsAndOrder) {
  std::vector<at::Tensor> p = {at::zeros({10}), at::zeros({10}), at::zeros({10}, at::kDouble), at::zeros({30})};
  // First cap 40 bytes, then 100: float 3 then 0 -> closes after 3 (120 B);
  // 2 is double (own bucket), 1 joins a new float bucket.
  auto b = assign_buckets(p, {3, 2, 0, 1}, 40, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{3}));
  EXPECT_EQ(b[1], (std::vector<size_t>{2}));
  EXPECT_EQ(b[2], (std::vector<size_t>{0, 1}));
  // A parameter of at least the cap closes the open bucket and goes alone.
  b = assign_buckets({at::zeros({2}), at::zeros({30}), at::zeros({2})}, {0, 1, 2}, 400, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0}));
  EXPECT_EQ(b[1], (std::vector<size_t>{1}));
  EXPECT_EQ(b[2], (std::vector<size_t>{2}));
}

TEST(DdpErrors, UnusedParameterWithoutFindUnusedNamesIt) {
  PerRank<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    Net net(6, /*use_extra=*/false);
    DistributedDataParallel<Net> ddp(net);
    at::Tensor x = at::randn({3, 4});
    ddp(x).sum().backward();  // extra.* get no gradient
    try {
      ddp(x);
      errors.add(rank, "no error");
    } catch (const ConfigError& e) {
      errors.add(rank, e.what());
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors.of(r)[0];
    EXPECT_NE(e.find("received no gradient on rank " + std::to_string(r)), std::string::npos) << e;
    EXPECT_NE(e.find("extra."), std::string::npos) << e;
    EXPECT_NE(e.find("find_unused_parameters"), std::string::npos) << e;
  }
}

TEST(DdpErrors, DivergentShapesNameTheParameter) {
  PerRank<std::string> errors(3);
  run_torch_ranks(3, [&](int rank, int) {
    Net net(rank == 2 ? 7 : 6);
    try {
      DistributedDataParallel<Net> ddp(net);
      errors.add(rank, "no error");
    } catch (const MismatchError& e) {
      errors.add(rank, e.what());
    }
  });
  for (int r = 0; r < 3; ++r) {
    const std::string& e = errors.of(r)[0];
    EXPECT_NE(e.find("rank 2"), std::string::npos) << e;
    EXPECT_NE(e.find("parameter fc3.weight"), std::string::npos) << e;  // first registered tensor that differs
  }
}

struct Wider : nn::Module {
  explicit Wider(bool more) {
    fc = register_module("fc", nn::Linear(4, 3));
    if (more) head = register_module("head", nn::Linear(3, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return head ? head(fc(x)) : fc(x); }
  nn::Linear fc{nullptr}, head{nullptr};
};

TEST(DdpErrors, DivergentParameterCountNamesTheParameter) {
  PerRank<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    auto net = std::make_shared<Wider>(rank == 1);
    try {
      DistributedDataParallelBase ddp(*net, {});
      errors.add(rank, "no error");
    } catch (const MismatchError& e) {
      errors.add(rank, e.what());
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors.of(r)[0];
    EXPECT_NE(e.find("head.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("missing on rank 0"), std::string::npos) << e;
  }
}

TEST(DdpBuffers, RankZeroBuffersAtEveryForward) {
  PerRank<at::Tensor> means(2);
  run_torch_ranks(2, [&](int rank, int) {
    nn::BatchNorm1d bn(3);
    DistributedDataParallel<nn::BatchNorm1d> ddp(bn);
    // Different data per rank: local running means diverge after a forward,
    // and the next forward starts from rank 0's again.
    ddp(at::full({4, 3}, float(rank + 1)) + at::arange(4).unsqueeze(1));
    at::Tensor after_first = bn->running_mean.clone();
    ddp(at::zeros({4, 3}));
    means.add(rank, after_first);
    means.add(rank, bn->running_mean.clone());
  });
  // Running mean: 0.9 * 0 + 0.1 * batch mean (rank + 2.5).
  EXPECT_TRUE(at::allclose(means.of(0)[0], at::full({3}, 0.25f)));
  EXPECT_TRUE(at::allclose(means.of(1)[0], at::full({3}, 0.35f)));
  // Second forward began from rank 0's 0.25 on both ranks, then a zero batch.
  EXPECT_TRUE(at::allclose(means.of(1)[1], at::full({3}, 0.225f)));
  EXPECT_TRUE(at::allclose(means.of(0)[1], means.of(1)[1]));
}


// ---- replica agreement (issue 12, item 8) ----

std::vector<std::string> ddp_mismatch_errors_of(const std::function<void(int rank)>& fn) {
  return cohort::testing::run_torch_ranks_errors<MismatchError>(2, fn);
}

TEST(DdpAgreement, DivergedReplicasAreFoundAtTheNextPeriodicCheck) {
  const auto errors = ddp_mismatch_errors_of([&](int rank) {
    Net net(6, /*use_extra=*/true);
    DistributedDataParallel<Net> ddp(net, {.agreement_check_steps = 3});
    torch::optim::SGD sgd(net->parameters(), 0.1);
    const at::Tensor x = at::ones({2, 4});
    for (int s = 1; s <= 6; ++s) {
      if (s == 2 && rank == 1) {
        torch::NoGradGuard no_grad;
        net->fc2->bias.add_(1e-3);
      }
      sgd.zero_grad();
      ddp(x).sum().backward();
      sgd.step();
    }
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[size_t(r)].find("parameters differ at step 3: 'fc2.bias' on rank 1"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
}

TEST(DdpAgreement, UnevenStepCountNamesTheRanks) {
  const auto errors = ddp_mismatch_errors_of([&](int rank) {
    Net net(6, /*use_extra=*/true);
    DistributedDataParallel<Net> ddp(net);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    const at::Tensor x = at::ones({2, 4});
    for (int s = 0; s < (rank == 1 ? 3 : 2); ++s) {
      sgd.zero_grad();
      ddp(x).sum().backward();
      sgd.step();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("DistributedDataParallel: rank 1 is in step 3 but rank 0 shut down before it"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[1].find("cohort::join()"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace cohort::distributed_data_parallel_test
