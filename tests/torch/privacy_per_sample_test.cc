// cohort/torch/privacy: each layer's per-sample squared norms and clipped
// sums against a loop of one-sample backward passes in float64; clipping;
// the micro-batch fallback; sigma = 0 and C = inf giving plain SGD's
// gradient; the noise's variance at 1, 2 and 4 ranks; the BatchNorm refusal.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "cohort/common/error.h"
#include "cohort/torch/privacy/gaussian_noise.h"
#include "cohort/torch/privacy/per_sample.h"

namespace cohort::privacy::privacy_per_sample_test {
namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// The reference: per-sample gradients of loss_i = sum(forward(i) * R_i), one
// backward per sample, flattened and concatenated over `params`: [B, P].
torch::Tensor loop_gradients(int64_t batch, const std::vector<torch::Tensor>& params,
                             const std::function<torch::Tensor(int64_t)>& loss_of) {
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < batch; ++i) {
    auto grads = torch::autograd::grad({loss_of(i)}, params);
    std::vector<torch::Tensor> flat;
    for (auto& g : grads) flat.push_back(g.flatten());
    rows.push_back(torch::cat(flat));
  }
  return torch::stack(rows);
}

// Checks a layer's norms and scaled sums against the loop.
void expect_matches_loop(const LayerGradients& layer, const torch::Tensor& reference) {
  const torch::Tensor expected_norms = reference.pow(2).sum(1);
  EXPECT_TRUE(torch::allclose(layer.squared_norms, expected_norms, 1e-10, 1e-12))
      << layer.squared_norms << " vs " << expected_norms;
  const torch::Tensor c = torch::rand({reference.size(0)}, kF64);
  std::vector<torch::Tensor> flat;
  for (auto& s : layer.scaled_sum(c)) flat.push_back(s.flatten());
  EXPECT_TRUE(torch::allclose(torch::cat(flat), (c.unsqueeze(1) * reference).sum(0), 1e-10, 1e-12));
}

TEST(PerSample, LinearMatchesLoopFlatAndSequence) {
  torch::manual_seed(1);
  for (int64_t t : {0, 3, 40}) {  // 0: [B, in]; 3: ghost norms; 40: T^2 > in*out, materialised
    const int64_t b = 5, in = 6, out = 4;
    torch::Tensor w = torch::randn({out, in}, kF64).requires_grad_(), bias = torch::randn({out}, kF64).requires_grad_();
    const torch::Tensor x = t == 0 ? torch::randn({b, in}, kF64) : torch::randn({b, t, in}, kF64);
    const torch::Tensor r = t == 0 ? torch::randn({b, out}, kF64) : torch::randn({b, t, out}, kF64);
    const torch::Tensor ref = loop_gradients(b, {w, bias}, [&](int64_t i) {
      return (torch::nn::functional::linear(x[i], w, bias) * r[i]).sum();
    });
    expect_matches_loop(linear_gradients(x, r, true), ref);
  }
}

TEST(PerSample, ConvMatchesLoop) {
  torch::manual_seed(2);
  const int64_t b = 4;
  {  // Conv2d 3 -> 5 channels, kernel 3x2, stride 2x1, padding 1x0, dilation 1x2
    torch::Tensor w = torch::randn({5, 3, 3, 2}, kF64).requires_grad_(), bias = torch::randn({5}, kF64).requires_grad_();
    const torch::Tensor x = torch::randn({b, 3, 9, 8}, kF64);
    auto forward = [&](const torch::Tensor& in) {
      return torch::conv2d(in, w, bias, {2, 1}, {1, 0}, {1, 2});
    };
    const torch::Tensor r = torch::randn_like(forward(x));
    const torch::Tensor ref =
        loop_gradients(b, {w, bias}, [&](int64_t i) { return (forward(x[i].unsqueeze(0)) * r[i].unsqueeze(0)).sum(); });
    // The clipped sum from the kept per-sample gradients, and recomputed.
    for (const int64_t kept : {kKeptConvGradientBytes, int64_t(0)})
      expect_matches_loop(conv_gradients(x, r, {3, 2}, {2, 1}, {1, 0}, {1, 2}, true, kept), ref);
  }
  {  // Conv1d 2 -> 3, kernel 4, stride 2, padding 1, no bias
    torch::Tensor w = torch::randn({3, 2, 4}, kF64).requires_grad_();
    const torch::Tensor x = torch::randn({b, 2, 11}, kF64);
    auto forward = [&](const torch::Tensor& in) { return torch::conv1d(in, w, {}, 2, 1); };
    const torch::Tensor r = torch::randn_like(forward(x));
    const torch::Tensor ref =
        loop_gradients(b, {w}, [&](int64_t i) { return (forward(x[i].unsqueeze(0)) * r[i].unsqueeze(0)).sum(); });
    for (const int64_t kept : {kKeptConvGradientBytes, int64_t(0)})
      expect_matches_loop(conv_gradients(x, r, {4}, {2}, {1}, {1}, false, kept), ref);
  }
}

TEST(PerSample, EmbeddingMatchesLoopWithRepeatedIndices) {
  torch::manual_seed(3);
  const int64_t b = 6, t = 7, rows = 5, d = 3;  // 7 lookups in 5 rows: repeats in every sample
  torch::Tensor w = torch::randn({rows, d}, kF64).requires_grad_();
  const torch::Tensor idx = torch::randint(rows, {b, t}, torch::kInt64);
  const torch::Tensor r = torch::randn({b, t, d}, kF64);
  const torch::Tensor ref = loop_gradients(b, {w}, [&](int64_t i) { return (torch::embedding(w, idx[i]) * r[i]).sum(); });
  expect_matches_loop(embedding_gradients(idx, r, rows), ref);
}

TEST(PerSample, LayerNormAndGroupNormMatchLoop) {
  torch::manual_seed(4);
  const int64_t b = 4;
  {
    torch::Tensor w = torch::randn({3, 5}, kF64).requires_grad_(), bias = torch::randn({3, 5}, kF64).requires_grad_();
    const torch::Tensor x = torch::randn({b, 2, 3, 5}, kF64), r = torch::randn({b, 2, 3, 5}, kF64);
    const torch::Tensor ref = loop_gradients(b, {w, bias}, [&](int64_t i) {
      return (torch::layer_norm(x[i], {3, 5}, w, bias, 1e-5) * r[i]).sum();
    });
    expect_matches_loop(layer_norm_gradients(x, r, 2, 1e-5), ref);
  }
  {
    torch::Tensor w = torch::randn({6}, kF64).requires_grad_(), bias = torch::randn({6}, kF64).requires_grad_();
    const torch::Tensor x = torch::randn({b, 6, 4, 3}, kF64), r = torch::randn({b, 6, 4, 3}, kF64);
    const torch::Tensor ref = loop_gradients(b, {w, bias}, [&](int64_t i) {
      return (torch::group_norm(x[i].unsqueeze(0), 3, w, bias, 1e-5) * r[i].unsqueeze(0)).sum();
    });
    expect_matches_loop(group_norm_gradients(x, r, 3, 1e-5), ref);
  }
}

TEST(PerSample, ClippingBoundsEveryNormAndInfiniteNormIsPlainSgd) {
  torch::manual_seed(5);
  const int64_t b = 16, in = 8, out = 3;
  torch::Tensor w = torch::randn({out, in}, kF64).requires_grad_(), bias = torch::zeros({out}, kF64).requires_grad_();
  const torch::Tensor x = torch::randn({b, in}, kF64) * 3, r = torch::randn({b, out}, kF64);
  const LayerGradients layer = linear_gradients(x, r, true);
  const torch::Tensor c = clip_factors(layer.squared_norms, 0.5);
  EXPECT_TRUE(((c * c * layer.squared_norms).sqrt() <= 0.5 + 1e-9).all().item<bool>());
  EXPECT_TRUE((c < 1).any().item<bool>());  // the norm binds somewhere
  // C = inf: factors 1, the clipped sum is the batch gradient.
  const auto sums = layer.scaled_sum(clip_factors(layer.squared_norms, INFINITY));
  (torch::nn::functional::linear(x, w, bias) * r).sum().backward();
  EXPECT_TRUE(torch::allclose(sums[0], w.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(sums[1], bias.grad(), 1e-12, 1e-12));
}

// The fallback on a two-layer network equals clipping the loop's rows by hand.
TEST(PerSample, MicrobatchFallbackEqualsClippedLoop) {
  torch::manual_seed(6);
  torch::nn::Sequential net(torch::nn::Linear(5, 7), torch::nn::Tanh(), torch::nn::Linear(7, 2));
  net->to(torch::kFloat64);
  const torch::Tensor x = torch::randn({9, 5}, kF64), y = torch::randn({9, 2}, kF64);
  auto loss_of = [&](int64_t i) { return (net->forward(x[i].unsqueeze(0)) - y[i]).pow(2).sum(); };
  const auto params = net->parameters();
  const torch::Tensor ref = loop_gradients(9, params, loss_of);
  const torch::Tensor norms = clipped_sum_by_microbatches(params, 9, loss_of, 0.3);
  EXPECT_TRUE(torch::allclose(norms, ref.pow(2).sum(1).sqrt(), 1e-12, 1e-12));
  const torch::Tensor c = (0.3 / (norms + 1e-6)).clamp_max(1.0);
  std::vector<torch::Tensor> flat;
  for (auto& p : params) flat.push_back(p.grad().flatten());
  EXPECT_TRUE(torch::allclose(torch::cat(flat), (c.unsqueeze(1) * ref).sum(0), 1e-12, 1e-12));
}

// The summed noise of W ranks has variance (sigma C)^2 whatever W. With
// n = 400000 draws the sample variance's relative standard deviation is
// sqrt(2 / n) = 0.22%; 6 of them (1.3%) is a false-failure rate of 2e-9 per
// check, and the seeds are fixed. Both precisions: float32 gradients draw
// in float32.
TEST(Noise, TotalVarianceIsTheSameAtOneTwoAndFourRanks) {
  const int64_t n = 400000;
  for (auto dtype : {torch::kFloat64, torch::kFloat32})
    for (NoiseShare share : {NoiseShare::split, NoiseShare::designated})
      for (int world : {1, 2, 4}) {
        torch::Tensor total = torch::zeros({n}, kF64);
        for (int rank = 0; rank < world; ++rank) {
          torch::Tensor g = torch::zeros({n}, dtype);
          add_noise_share({g}, {.noise_multiplier = 1.3, .max_grad_norm = 0.7, .rank = rank, .world_size = world,
                                .seed = 42, .share = share}, /*step=*/3);
          total += g.to(torch::kFloat64);
        }
        const double expected = (1.3 * 0.7) * (1.3 * 0.7);
        EXPECT_NEAR(total.var().item<double>() / expected, 1.0, 6 * std::sqrt(2.0 / n))
            << "world " << world << " dtype " << dtype;
        EXPECT_NEAR(total.mean().item<double>(), 0.0, 6 * std::sqrt(expected / n));
      }
}

TEST(Noise, RanksAndStepsDrawIndependently) {
  auto draw = [](int rank, int64_t step) {
    torch::Tensor g = torch::zeros({1000}, kF64);
    add_noise_share({g}, {.noise_multiplier = 1, .max_grad_norm = 1, .rank = rank, .world_size = 2, .seed = 9}, step);
    return g;
  };
  EXPECT_TRUE(torch::equal(draw(0, 1), draw(0, 1)));  // reproducible
  EXPECT_FALSE(torch::equal(draw(0, 1), draw(1, 1)));
  EXPECT_FALSE(torch::equal(draw(0, 1), draw(0, 2)));
  // Correlation of two ranks' draws: |r| < 6 / sqrt(1000).
  const torch::Tensor a = draw(0, 1), b = draw(1, 1);
  EXPECT_LT(std::fabs(((a * b).mean() / (a.std() * b.std())).item<double>()), 6 / std::sqrt(1000.0));
}

TEST(Noise, SecureDrawsHaveTheRightLaw) {
  const int64_t n = 200000;
  const torch::Tensor z = secure_normal(n, 2.0);
  EXPECT_NEAR(z.var().item<double>() / 4.0, 1.0, 6 * std::sqrt(2.0 / n));
  EXPECT_NEAR(z.mean().item<double>(), 0.0, 6 * std::sqrt(4.0 / n));
  // Fourth moment of a normal is 3 sigma^4 (sum of four uniforms-based
  // normals is normal): relative sd of the sample kurtosis ~ sqrt(24 / n).
  const double kurtosis = (z.pow(4).mean() / z.var().pow(2)).item<double>();
  EXPECT_NEAR(kurtosis, 3.0, 6 * std::sqrt(24.0 / n));
  torch::Tensor g = torch::zeros({10}, torch::kFloat32);
  add_noise_share({g}, {.noise_multiplier = 1, .max_grad_norm = 1, .secure = true}, 0);
  EXPECT_GT(g.abs().sum().item<float>(), 0);
}

TEST(Noise, BadOptions) {
  torch::Tensor g = torch::zeros({3});
  EXPECT_THROW(add_noise_share({g}, {.noise_multiplier = -1, .max_grad_norm = 1}, 0), ConfigError);
  EXPECT_THROW(add_noise_share({g}, {.noise_multiplier = 1, .max_grad_norm = 0}, 0), ConfigError);
  EXPECT_THROW(add_noise_share({g}, {.noise_multiplier = 1, .max_grad_norm = 1, .rank = 2, .world_size = 2}, 0),
               ConfigError);
}

TEST(ModuleCheck, BatchNormIsRefusedByNameWithTheReplacement) {
  torch::nn::Sequential ok(torch::nn::Conv2d(1, 4, 3), torch::nn::GroupNorm(2, 4), torch::nn::ReLU());
  EXPECT_NO_THROW(check_private_compatible(*ok));
  torch::nn::Sequential bad(torch::nn::Conv2d(1, 4, 3), torch::nn::BatchNorm2d(4), torch::nn::ReLU());
  try {
    check_private_compatible(*bad);
    ADD_FAILURE() << "BatchNorm2d was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'1'"), std::string::npos) << what;
    EXPECT_NE(what.find("BatchNorm2d"), std::string::npos) << what;
    EXPECT_NE(what.find("GroupNorm"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace cohort::privacy::privacy_per_sample_test
