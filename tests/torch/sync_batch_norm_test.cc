// SyncBatchNorm on 1..4 rank threads against torch::nn::BatchNorm over the
// concatenated global batch (float64): output, grad_input, the sum over ranks
// of grad weight / grad bias, and the running statistics; uneven per-rank
// batches including a rank with 0 rows; eval mode; conversion of a
// Sequential's BatchNorm children.
#include "cohort/torch/data_parallel/sync_batch_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/torch/core/runtime.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::sync_batch_norm_test {
namespace {

using testing::PerRank;
using testing::run_torch_ranks;

// Rows of the global batch each rank holds, for world sizes 1..4.
std::vector<int64_t> rows_of(int size) {
  switch (size) {
    case 1:
      return {5};
    case 2:
      return {3, 2};
    case 3:
      return {4, 1, 2};
    default:
      return {3, 0, 1, 4};
  }
}

struct Case {
  std::vector<int64_t> spatial;  // sizes after (N, C)
  std::optional<double> momentum = 0.1;
  bool affine = true;
};

std::string describe(const Case& c, int size) {
  std::string s = "world " + std::to_string(size) + ", spatial dims " + std::to_string(c.spatial.size());
  s += c.momentum ? ", momentum " + std::to_string(*c.momentum) : ", cumulative average";
  return s + (c.affine ? ", affine" : ", no affine");
}

// What one rank records per training step.
struct StepResult {
  at::Tensor output, grad_input, grad_weight, grad_bias, running_mean, running_var;
  int64_t batches = 0;
};

constexpr int64_t kChannels = 3;
constexpr int kSteps = 2;

void expect_equals_global_batch_norm(const Case& c, int size) {
  SCOPED_TRACE(describe(c, size));
  const std::vector<int64_t> rows = rows_of(size);
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  std::vector<int64_t> offsets(rows.size(), 0);
  for (size_t r = 1; r < rows.size(); ++r) offsets[r] = offsets[r - 1] + rows[r - 1];

  torch::manual_seed(3);
  std::vector<int64_t> shape{total, kChannels};
  shape.insert(shape.end(), c.spatial.begin(), c.spatial.end());
  const at::TensorOptions f64 = at::TensorOptions(at::kDouble);
  std::vector<at::Tensor> inputs, seeds;  // per step: global input and dLoss/dy
  for (int s = 0; s < kSteps; ++s) {
    inputs.push_back(torch::randn(shape, f64) * 2 + 0.5);
    seeds.push_back(torch::randn(shape, f64));
  }
  const at::Tensor weight = torch::rand({kChannels}, f64) + 0.5, bias = torch::randn({kChannels}, f64);

  // Reference: one BatchNorm of the right rank over the whole batch.
  torch::nn::BatchNormOptions bn_options = torch::nn::BatchNormOptions(kChannels).affine(c.affine);
  if (c.momentum)
    bn_options.momentum(*c.momentum);
  else
    bn_options.momentum(c10::nullopt);
  std::shared_ptr<torch::nn::Module> reference;
  std::function<at::Tensor(const at::Tensor&)> reference_forward;
  if (c.spatial.size() <= 1) {
    torch::nn::BatchNorm1d bn(bn_options);
    reference = bn.ptr();
    reference_forward = [bn](const at::Tensor& x) mutable { return bn->forward(x); };
  } else if (c.spatial.size() == 2) {
    torch::nn::BatchNorm2d bn(bn_options);
    reference = bn.ptr();
    reference_forward = [bn](const at::Tensor& x) mutable { return bn->forward(x); };
  } else {
    torch::nn::BatchNorm3d bn(bn_options);
    reference = bn.ptr();
    reference_forward = [bn](const at::Tensor& x) mutable { return bn->forward(x); };
  }
  reference->to(at::kDouble);
  if (c.affine) {
    torch::NoGradGuard no_grad;
    reference->named_parameters()["weight"].copy_(weight);
    reference->named_parameters()["bias"].copy_(bias);
  }
  std::vector<StepResult> expected;
  for (int s = 0; s < kSteps; ++s) {
    for (auto& p : reference->parameters()) p.mutable_grad().reset();
    const at::Tensor x = inputs[size_t(s)].clone().requires_grad_();
    const at::Tensor y = reference_forward(x);
    (y * seeds[size_t(s)]).sum().backward();
    StepResult e;
    e.output = y.detach();
    e.grad_input = x.grad();
    if (c.affine) {
      e.grad_weight = reference->named_parameters()["weight"].grad().clone();
      e.grad_bias = reference->named_parameters()["bias"].grad().clone();
    }
    e.running_mean = reference->named_buffers()["running_mean"].clone();
    e.running_var = reference->named_buffers()["running_var"].clone();
    e.batches = reference->named_buffers()["num_batches_tracked"].item<int64_t>();
    expected.push_back(e);
  }

  PerRank<StepResult> got(size);
  run_torch_ranks(size, [&](int rank, int) {
    SyncBatchNorm sbn(SyncBatchNormOptions{.num_features = kChannels, .momentum = c.momentum, .affine = c.affine});
    sbn->to(at::kDouble);
    if (c.affine) {
      torch::NoGradGuard no_grad;
      sbn->weight.copy_(weight);
      sbn->bias.copy_(bias);
    }
    for (int s = 0; s < kSteps; ++s) {
      if (c.affine) {
        sbn->weight.mutable_grad().reset();
        sbn->bias.mutable_grad().reset();
      }
      const at::Tensor x =
          inputs[size_t(s)].narrow(0, offsets[size_t(rank)], rows[size_t(rank)]).clone().requires_grad_();
      const at::Tensor y = sbn->forward(x);
      (y * seeds[size_t(s)].narrow(0, offsets[size_t(rank)], rows[size_t(rank)])).sum().backward();
      StepResult r;
      r.output = y.detach();
      r.grad_input = x.grad();
      if (c.affine) {
        r.grad_weight = sbn->weight.grad().clone();
        r.grad_bias = sbn->bias.grad().clone();
      }
      r.running_mean = sbn->running_mean.clone();
      r.running_var = sbn->running_var.clone();
      r.batches = sbn->num_batches_tracked.item<int64_t>();
      got.add(rank, r);
    }
  });

  auto close = [](const at::Tensor& a, const at::Tensor& b) {
    return a.sizes() == b.sizes() && at::allclose(a, b, 1e-10, 1e-12);
  };
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const StepResult& e = expected[size_t(s)];
    std::vector<at::Tensor> outputs, grads;
    at::Tensor grad_weight = torch::zeros({kChannels}, f64), grad_bias = torch::zeros({kChannels}, f64);
    for (int r = 0; r < size; ++r) {
      const StepResult& g = got.of(r).at(size_t(s));
      ASSERT_TRUE(g.grad_input.defined()) << "rank " << r;
      outputs.push_back(g.output);
      grads.push_back(g.grad_input);
      if (c.affine) {
        grad_weight += g.grad_weight;
        grad_bias += g.grad_bias;
      }
      EXPECT_TRUE(close(g.running_mean, e.running_mean)) << "rank " << r;
      EXPECT_TRUE(close(g.running_var, e.running_var)) << "rank " << r;
      EXPECT_EQ(g.batches, e.batches) << "rank " << r;
    }
    EXPECT_TRUE(close(at::cat(outputs), e.output));
    EXPECT_TRUE(close(at::cat(grads), e.grad_input));
    if (c.affine) {
      EXPECT_TRUE(close(grad_weight, e.grad_weight));
      EXPECT_TRUE(close(grad_bias, e.grad_bias));
    }
  }
}

TEST(SyncBatchNorm, TwoDimInputsEqualBatchNorm2dOverTheGlobalBatch) {
  for (int size = 1; size <= 4; ++size) expect_equals_global_batch_norm({.spatial = {3, 2}}, size);
}

TEST(SyncBatchNorm, OneDimInputsEqualBatchNorm1d) {
  for (int size = 1; size <= 4; ++size) {
    expect_equals_global_batch_norm({.spatial = {}}, size);   // (N, C)
    expect_equals_global_batch_norm({.spatial = {4}}, size);  // (N, C, L)
  }
}

TEST(SyncBatchNorm, ThreeDimInputsCumulativeAverageAndNoAffine) {
  expect_equals_global_batch_norm({.spatial = {2, 2, 2}}, 3);
  expect_equals_global_batch_norm({.spatial = {2, 3}, .momentum = std::nullopt}, 4);
  expect_equals_global_batch_norm({.spatial = {2, 3}, .affine = false}, 2);
}

// One fused allreduce per training forward (sum, sum of squares, count)
// and one per backward (sum dy, sum dy * x_hat); none in eval mode.
TEST(SyncBatchNorm, OneAllreducePerForwardAndPerBackward) {
  struct Traffic {
    uint64_t forward_ops, forward_bytes, backward_ops, backward_bytes, eval_ops;
  };
  PerRank<Traffic> traffic(3);
  run_torch_ranks(3, [&](int rank, int) {
    engine::Engine& e = current_engine();
    SyncBatchNorm sbn(4);
    sbn->to(at::kDouble);
    const at::Tensor x = torch::randn({rank + 1, 4, 3}, at::TensorOptions(at::kDouble)).requires_grad_();
    const engine::EngineStats before = e.stats();
    const at::Tensor y = sbn->forward(x);
    const engine::EngineStats after_forward = e.stats();
    y.pow(2).sum().backward();
    const engine::EngineStats after_backward = e.stats();
    sbn->eval();
    sbn->forward(x);
    const engine::EngineStats after_eval = e.stats();
    traffic.add(rank,
                {after_forward.ops_completed - before.ops_completed, after_forward.bytes - before.bytes,
                 after_backward.ops_completed - after_forward.ops_completed, after_backward.bytes - after_forward.bytes,
                 after_eval.ops_completed - after_backward.ops_completed});
  });
  for (int r = 0; r < 3; ++r) {
    const Traffic& t = traffic.of(r).at(0);
    EXPECT_EQ(t.forward_ops, 1u) << "rank " << r;
    EXPECT_EQ(t.forward_bytes, (2 * 4 + 1) * sizeof(double)) << "rank " << r;
    EXPECT_EQ(t.backward_ops, 1u) << "rank " << r;
    EXPECT_EQ(t.backward_bytes, 2 * 4 * sizeof(double)) << "rank " << r;
    EXPECT_EQ(t.eval_ops, 0u) << "rank " << r;
  }
}

TEST(SyncBatchNorm, WorldOfOneIsBatchNormBitForBit) {
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({6, 4, 3, 3});
  torch::nn::BatchNorm2d bn(4);
  run_torch_ranks(1, [&](int, int) {
    SyncBatchNorm sbn(4);
    const at::Tensor y = sbn->forward(x), expected = bn->forward(x);
    EXPECT_TRUE(at::equal(y, expected));
    EXPECT_TRUE(at::equal(sbn->running_var, bn->running_var));
  });
}

// Float32 input far from zero: the statistics are accumulated in float64
// about each rank's own mean, so the variance does not cancel away.
TEST(SyncBatchNorm, Float32WithLargeMeanStaysAccurate) {
  torch::manual_seed(9);
  const at::Tensor x = torch::randn({8, 2, 4, 4}) * 0.5 + 3000;  // float32
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor mean = xd.mean({0, 2, 3}, true);
  const at::Tensor var = (xd - mean).pow(2).mean({0, 2, 3}, true);
  const at::Tensor expected = (xd - mean) / (var + 1e-5).sqrt();
  PerRank<at::Tensor> out(2);
  run_torch_ranks(2, [&](int rank, int) {
    SyncBatchNorm sbn(2);
    out.add(rank, sbn->forward(x.narrow(0, rank * 4, 4)).detach());
  });
  const at::Tensor y = at::cat({out.of(0)[0], out.of(1)[0]}).to(at::kDouble);
  // Inputs carry float32 rounding (ulp 2.4e-4 at 3000, i.e. 5e-4 of a std).
  EXPECT_LE((y - expected).abs().max().item<double>(), 2e-3);
}

TEST(SyncBatchNorm, EvalUsesRunningStatsWithoutAnEngine) {
  torch::manual_seed(13);
  torch::nn::BatchNorm2d bn(3);
  SyncBatchNorm sbn(3);
  {
    torch::NoGradGuard no_grad;
    bn->running_mean.normal_();
    bn->running_var.uniform_(0.5, 2);
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.normal_();
    for (auto& p : sbn->named_parameters()) p.value().copy_(bn->named_parameters()[p.key()]);
    for (auto& b : sbn->named_buffers()) b.value().copy_(bn->named_buffers()[b.key()]);
  }
  bn->eval();
  sbn->eval();
  const at::Tensor x = torch::randn({4, 3, 2, 2});
  // This thread has no engine: eval must not communicate.
  EXPECT_TRUE(at::allclose(sbn->forward(x), bn->forward(x), 1e-6, 1e-7));
  // Training does, and says so.
  sbn->train();
  EXPECT_THROW(sbn->forward(x), ConfigError);
}

TEST(SyncBatchNorm, BadInputsAreConfigErrors) {
  SyncBatchNorm sbn(3);
  EXPECT_THROW(sbn->forward(torch::randn({4, 2, 5})), ConfigError);  // channels
  EXPECT_THROW(sbn->forward(torch::randn({4})), ConfigError);        // no channel dim
  EXPECT_THROW(SyncBatchNorm(SyncBatchNormOptions{.num_features = 0}), ConfigError);
  // One value per channel over all ranks: every rank fails the same way.
  PerRank<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    SyncBatchNorm s(3);
    try {
      s->forward(torch::randn({rank == 0 ? 1 : 0, 3}));
      errors.add(rank, "none");
    } catch (const ConfigError& e) {
      errors.add(rank, e.what());
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors.of(r).at(0).find("more than 1 value"), std::string::npos) << r;
  run_torch_ranks(1, [&](int, int) {
    SyncBatchNorm s(3);
    try {
      s->forward(torch::randn({1, 3}));
      errors.add(0, "none");
    } catch (const ConfigError& e) {
      errors.add(0, e.what());
    }
  });
  EXPECT_NE(errors.of(0).at(1).find("more than 1 value"), std::string::npos);
}

TEST(SyncBatchNorm, ConvertReplacesBatchNormChildren) {
  torch::manual_seed(17);
  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3), torch::nn::ReLU());
  {
    torch::NoGradGuard no_grad;
    net->forward(torch::randn({6, 4}) * 2);  // non-trivial running statistics
  }
  torch::nn::Sequential converted = convert_sync_batch_norm(net);
  ASSERT_EQ(converted->size(), 3u);
  EXPECT_NE(converted->ptr(1)->as<SyncBatchNormImpl>(), nullptr);
  EXPECT_EQ(converted->ptr(0).get(), net->ptr(0).get());  // shared, not cloned
  EXPECT_EQ(converted->named_children().keys(), net->named_children().keys());
  EXPECT_TRUE(at::equal(testing::flat_parameters(*converted), testing::flat_parameters(*net)));
  const auto bn_buffers = net->named_buffers(), sync_buffers = converted->named_buffers();
  ASSERT_EQ(bn_buffers.size(), sync_buffers.size());
  for (const auto& b : bn_buffers) EXPECT_TRUE(at::equal(b.value(), sync_buffers[b.key()])) << b.key();
  const at::Tensor x = torch::randn({5, 4});
  net->eval();
  converted->eval();
  EXPECT_TRUE(at::allclose(converted->forward(x), net->forward(x), 1e-6, 1e-7));
  // Training at world size 1 is BatchNorm too.
  net->train();
  converted->train();
  run_torch_ranks(1, [&](int, int) { EXPECT_TRUE(at::equal(converted->forward(x), net->forward(x))); });
}

}  // namespace
}  // namespace cohort::sync_batch_norm_test
