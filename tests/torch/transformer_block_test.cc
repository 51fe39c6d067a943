// The Megatron transformer block at tp = 1, 2, 4 against an independent
// float64 reference: a functional pre-LN GPT block written head by head with
// at:: ops on the full weights. Compared: the output, the input gradient and
// every parameter's gradient (each rank's slice against the slice of the
// reference's full gradient), then a few SGD steps; plus seeded
// initialisation across tp sizes, dropout consistency and argument errors.
#include "cohort/models/transformer_block.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "cohort/common/check.h"
#include "cohort/models/transformer.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::transformer_block_test {
namespace {

using Params = std::map<std::string, at::Tensor>;

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, double std = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::empty(shape, at::kDouble).normal_(0.0, std, gen);
}

// Relative to the largest |want|: 1e-10 for float64 (rounding differences
// only), about 1e-5 for float32 runs against the float64 reference.
void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what, int rank,
                  double tolerance = 1e-10) {
  COHORT_CHECK(got.defined() && want.defined()) << what << " on rank " << rank << ": undefined tensor";
  COHORT_CHECK(got.sizes() == want.sizes())
      << what << " on rank " << rank << ": shape " << got.sizes() << " vs " << want.sizes();
  const double scale = want.abs().max().item<double>() + 1e-12;
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  COHORT_CHECK(diff <= tolerance * scale)
      << what << " on rank " << rank << ": max |diff| " << diff << " (scale " << scale << ")";
}

constexpr int64_t kD = 16, kHeads = 4, kHidden = 32;

// Full weights of one block, LayerNorms included (not ones/zeros, so that
// their gradients are exercised).
Params full_weights(uint64_t seed) {
  Params p;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double mean = 0.0) {
    p[name] = randn(shape, seed + p.size(), 0.3) + mean;
  };
  add("ln1.weight", {kD}, 1.0);
  add("ln1.bias", {kD});
  add("attn.qkv.weight", {3 * kD, kD});
  add("attn.qkv.bias", {3 * kD});
  add("attn.proj.weight", {kD, kD});
  add("attn.proj.bias", {kD});
  add("ln2.weight", {kD}, 1.0);
  add("ln2.bias", {kD});
  add("mlp.fc.weight", {kHidden, kD});
  add("mlp.fc.bias", {kHidden});
  add("mlp.proj.weight", {kD, kHidden});
  add("mlp.proj.bias", {kD});
  return p;
}

// The reference block, written independently of the tp code: heads one at a
// time, an explicit causal mask, exact GELU.
at::Tensor reference_block(const at::Tensor& x, const Params& p) {
  const int64_t seq = x.size(1), hd = kD / kHeads;
  auto ln = [&](const at::Tensor& t, const std::string& n) {
    return at::layer_norm(t, {kD}, p.at(n + ".weight"), p.at(n + ".bias"), 1e-5);
  };
  const at::Tensor h = ln(x, "ln1");
  const at::Tensor qkv = at::linear(h, p.at("attn.qkv.weight"), p.at("attn.qkv.bias"));
  const at::Tensor q = qkv.narrow(-1, 0, kD), k = qkv.narrow(-1, kD, kD), v = qkv.narrow(-1, 2 * kD, kD);
  at::Tensor mask = at::zeros({seq, seq}, at::kDouble);
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = i + 1; j < seq; ++j) mask[i][j] = -std::numeric_limits<double>::infinity();
  std::vector<at::Tensor> heads;
  for (int64_t head = 0; head < kHeads; ++head) {
    const at::Tensor qh = q.narrow(-1, head * hd, hd), kh = k.narrow(-1, head * hd, hd),
                     vh = v.narrow(-1, head * hd, hd);
    const at::Tensor scores = at::bmm(qh, kh.transpose(1, 2)) / std::sqrt(double(hd)) + mask;
    heads.push_back(at::bmm(at::softmax(scores, -1), vh));
  }
  const at::Tensor x1 = x + at::linear(at::cat(heads, -1), p.at("attn.proj.weight"), p.at("attn.proj.bias"));
  const at::Tensor m = at::linear(at::gelu(at::linear(ln(x1, "ln2"), p.at("mlp.fc.weight"), p.at("mlp.fc.bias"))),
                                  p.at("mlp.proj.weight"), p.at("mlp.proj.bias"));
  return x1 + m;
}

Params leaves(const Params& p) {
  Params out;
  for (const auto& [name, t] : p) out[name] = t.clone().requires_grad_();
  return out;
}

cohort::models::TransformerBlock make_block(uint64_t seed = 0, at::ScalarType dtype = at::kDouble) {
  return cohort::models::TransformerBlock(kD, {.n_heads = kHeads, .mlp_hidden = kHidden, .seed = seed, .dtype = dtype});
}

class TransformerBlockTp : public ::testing::TestWithParam<int> {};

// In float64 (tight) and float32 (the dtype of real training; the tolerance
// of the issue, ~1e-5 relative), both against the float64 reference.
TEST_P(TransformerBlockTp, OutputAndEveryGradientMatchTheReference) {
  run_torch_ranks(GetParam(), [](int rank, int) {
    for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
      const double tol = dtype == at::kDouble ? 1e-10 : 2e-5;
      const Params full = full_weights(7);
      cohort::models::TransformerBlock block = make_block(0, dtype);
      cohort::load_full_parameters(*block, full);

      Params ref = leaves(full);
      const at::Tensor ref_x = randn({2, 5, kD}, 3).requires_grad_();
      const at::Tensor ref_y = reference_block(ref_x, ref);
      const at::Tensor up = randn({2, 5, kD}, 4);
      (ref_y * up).sum().backward();

      const at::Tensor x = ref_x.detach().to(dtype).requires_grad_();
      const at::Tensor y = block->forward(x);
      COHORT_CHECK(y.scalar_type() == dtype) << "block output dtype " << y.scalar_type();
      expect_close(y, ref_y.detach(), "block output", rank, tol);
      (y * up.to(dtype)).sum().backward();
      expect_close(x.grad(), ref_x.grad(), "input gradient", rank, tol);

      const auto specs = cohort::shard_specs(*block);
      const cohort::TensorParallelGroup g = cohort::TensorParallelGroup::of();
      int checked = 0;
      for (const auto& item : block->named_parameters()) {
        const std::string& name = item.key();
        const at::Tensor want = cohort::shard_of(ref.at(name).grad(), specs.at(name), g, name);
        expect_close(item.value().grad(), want, "gradient of " + name + " (" + c10::toString(dtype) + ")", rank, tol);
        ++checked;
      }
      COHORT_CHECK(checked == int(full.size())) << "checked " << checked << " parameters";
    }
  });
}

// Three SGD steps: the tp block's gathered weights follow the reference's.
TEST_P(TransformerBlockTp, SgdStepsFollowTheReference) {
  run_torch_ranks(GetParam(), [](int rank, int) {
    const Params full = full_weights(17);
    const double lr = 0.1;
    cohort::models::TransformerBlock block = make_block();
    cohort::load_full_parameters(*block, full);
    torch::optim::SGD sgd(block->parameters(), torch::optim::SGDOptions(lr));
    Params ref = leaves(full);
    for (int step = 0; step < 3; ++step) {
      const at::Tensor x = randn({2, 6, kD}, 100 + step), target = randn({2, 6, kD}, 200 + step);
      const at::Tensor ref_loss = (reference_block(x, ref) - target).pow(2).mean();
      ref_loss.backward();
      {
        torch::NoGradGuard no_grad;
        for (auto& [name, t] : ref) {
          t.sub_(lr * t.grad());
          t.grad().zero_();
        }
      }
      sgd.zero_grad();
      const at::Tensor loss = (block->forward(x) - target).pow(2).mean();
      expect_close(loss, ref_loss.detach(), "loss at step " + std::to_string(step), rank);
      loss.backward();
      sgd.step();
    }
    for (const auto& [name, t] : cohort::gather_full_parameters(*block))
      expect_close(t, ref.at(name).detach(), "weights after 3 steps: " + name, rank);
  });
}

// The same seed gives the same block at any tp size (Megatron's init).
TEST_P(TransformerBlockTp, SeededInitialisationMatchesTpOne) {
  Params single;
  run_torch_ranks(1, [&](int, int) { single = cohort::gather_full_parameters(*make_block(5)); });
  PerRank<Params> gathered(GetParam());
  run_torch_ranks(GetParam(), [&](int rank, int) { gathered.add(rank, cohort::gather_full_parameters(*make_block(5))); });
  for (int r = 0; r < GetParam(); ++r) {
    ASSERT_EQ(gathered.of(r)[0].size(), single.size());
    for (const auto& [name, t] : single) EXPECT_TRUE(at::equal(gathered.of(r)[0].at(name), t)) << name << " rank " << r;
  }
  // Distinct layers draw distinct weights.
  EXPECT_FALSE(at::equal(single.at("mlp.fc.weight").narrow(0, 0, kD), single.at("attn.proj.weight")));
}

// Dropout: in training mode the output stays identical across the tp ranks
// (the residual masks are drawn alike everywhere) and differs from eval
// mode, which equals the dropout-free block.
TEST_P(TransformerBlockTp, DropoutKeepsRanksConsistent) {
  const int n = GetParam();
  PerRank<at::Tensor> outputs(n);
  run_torch_ranks(n, [&](int rank, int) {
    cohort::models::TransformerBlock block(kD, {.n_heads = kHeads,
                                    .mlp_hidden = kHidden,
                                    .attention_dropout = 0.2,
                                    .residual_dropout = 0.3,
                                    .dtype = at::kDouble});
    cohort::models::TransformerBlock plain = make_block();
    const Params full = full_weights(9);
    cohort::load_full_parameters(*block, full);
    cohort::load_full_parameters(*plain, full);
    const at::Tensor x = randn({2, 4, kD}, 1);
    block->train();
    const at::Tensor train_y = block->forward(x).detach();
    outputs.add(rank, train_y);
    block->eval();
    const at::Tensor eval_y = block->forward(x).detach();
    expect_close(eval_y, plain->forward(x).detach(), "eval-mode output", rank);
    COHORT_CHECK((train_y - eval_y).abs().max().item<double>() > 1e-3) << "dropout changed nothing on rank " << rank;
  });
  for (int r = 1; r < n; ++r) EXPECT_TRUE(at::equal(outputs.of(r)[0], outputs.of(0)[0])) << "rank " << r;
}

// ---- the GPT model (transformer.h) ----

cohort::models::GptOptions gpt_options() {
  return cohort::models::GptOptions{.vocab_size = 16,
                        .max_seq_len = 8,
                        .d_model = kD,
                        .n_layers = 2,
                        .n_heads = kHeads,
                        .mlp_hidden = kHidden,
                        .init_std = 0.5,
                        .seed = 77,
                        .dtype = at::kDouble};
}

// The whole model from its full parameters, with the reference block.
at::Tensor reference_gpt_loss(const at::Tensor& ids, const at::Tensor& targets, const Params& p, int64_t layers) {
  namespace F = torch::nn::functional;
  at::Tensor h =
      at::embedding(p.at("embedding.tokens.weight"), ids) + p.at("embedding.positions").narrow(0, 0, ids.size(1));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string prefix = "blocks." + std::to_string(i) + ".";
    Params block;  // the same leaf tensors, under the block's own names
    for (const auto& [name, t] : p)
      if (name.rfind(prefix, 0) == 0) block[name.substr(prefix.size())] = t;
    h = reference_block(h, block);
  }
  h = at::layer_norm(h, {kD}, p.at("head.ln_f.weight"), p.at("head.ln_f.bias"), 1e-5);
  const at::Tensor logits = at::linear(h, p.at("head.lm_head.weight"));
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

TEST_P(TransformerBlockTp, GptModelLossAndGradientsMatchTheReference) {
  Params single;  // the tp = 1 model of the same seed
  run_torch_ranks(1, [&](int, int) { single = cohort::gather_full_parameters(*cohort::models::GptModel(gpt_options())); });
  run_torch_ranks(GetParam(), [&](int rank, int) {
    cohort::models::GptModel model(gpt_options());
    const Params full = cohort::gather_full_parameters(*model);
    COHORT_CHECK(full.size() == single.size()) << full.size() << " parameters vs " << single.size();
    for (const auto& [name, t] : single)
      COHORT_CHECK(at::equal(full.at(name), t)) << name << " differs from the tp = 1 model's on rank " << rank;

    at::Generator gen = at::detail::createCPUGenerator(5);
    const at::Tensor ids = at::empty({2, 7}, at::kLong).random_(0, 16, gen);
    const at::Tensor targets = at::empty({2, 7}, at::kLong).random_(0, 16, gen);
    Params ref = leaves(full);
    const at::Tensor ref_loss = reference_gpt_loss(ids, targets, ref, 2);
    ref_loss.backward();

    const at::Tensor loss = model->loss(ids, targets);
    expect_close(loss, ref_loss.detach(), "model loss", rank);
    loss.backward();
    const auto specs = cohort::shard_specs(*model);
    const cohort::TensorParallelGroup g = cohort::TensorParallelGroup::of();
    for (const auto& item : model->named_parameters())
      expect_close(item.value().grad(), cohort::shard_of(ref.at(item.key()).grad(), specs.at(item.key()), g, item.key()),
                   "gradient of " + item.key(), rank);
  });
}

// Pipeline stages build pieces; the pieces hold the model's weights (tp = 2:
// the seeds, not the split, are what is tested).
TEST(GptPieces, BuiltAloneMatchTheModel) {
  run_torch_ranks(2, [&](int rank, int) {
    const cohort::models::GptOptions o = gpt_options();
    cohort::models::GptModel model(o);
    auto same = [&](torch::nn::Module& piece, torch::nn::Module& in_model, const std::string& what) {
      const auto a = piece.named_parameters(), b = in_model.named_parameters();
      COHORT_CHECK(a.size() == b.size() && a.size() > 0) << what;
      for (const auto& item : a)
        COHORT_CHECK(at::equal(item.value(), b[item.key()])) << what << ": " << item.key() << " on rank " << rank;
    };
    cohort::models::GptEmbedding embedding(o);
    same(*embedding, *model->embedding, "embedding");
    for (int64_t i = 0; i < o.n_layers; ++i) {
      cohort::models::TransformerBlock block(o.d_model, cohort::models::gpt_block_options(o, i));
      same(*block, *model->block(i), "block " + std::to_string(i));
    }
    cohort::models::GptHead head(o);
    same(*head, *model->head, "head");
  });
}

INSTANTIATE_TEST_SUITE_P(TpSizes, TransformerBlockTp, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

std::string config_error_of(int n, const std::function<void()>& fn) {
  PerRank<std::string> messages(n);
  run_torch_ranks(n, [&](int rank, int) {
    try {
      fn();
      messages.add(rank, "");
    } catch (const ConfigError& e) {
      messages.add(rank, e.what());
    }
  });
  return messages.of(0)[0];
}

TEST(TransformerBlockErrors, HeadsMustDivideByTheGroupSize) {
  const std::string m = config_error_of(2, [] { cohort::models::TransformerBlock(12, {.n_heads = 3}); });
  EXPECT_NE(m.find("n_heads = 3 does not divide by the tensor-parallel size 2"), std::string::npos) << m;
  EXPECT_EQ(config_error_of(1, [] { cohort::models::TransformerBlock(12, {.n_heads = 3}); }), "");
}

TEST(TransformerBlockErrors, BadShapesAndOptions) {
  std::string m = config_error_of(1, [] { cohort::models::TransformerBlock(10, {.n_heads = 4}); });
  EXPECT_NE(m.find("d_model = 10 does not divide into n_heads = 4"), std::string::npos) << m;
  m = config_error_of(2, [] { cohort::models::TransformerBlock(8, {.n_heads = 2, .mlp_hidden = 5}); });
  EXPECT_NE(m.find("ColumnParallelLinear out_features = 5 does not divide"), std::string::npos) << m;
  m = config_error_of(1, [] { cohort::models::TransformerBlock(8, {.n_heads = 2, .attention_dropout = 1.0}); });
  EXPECT_NE(m.find("dropout probabilities must lie in [0, 1)"), std::string::npos) << m;
  m = config_error_of(1, [] { make_block()->forward(at::zeros({2, kD}, at::kDouble)); });
  EXPECT_NE(m.find("input must be (batch, seq, 16)"), std::string::npos) << m;
}

}  // namespace
}  // namespace cohort::testing::transformer_block_test
