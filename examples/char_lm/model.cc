#include "examples/char_lm/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cohort/common/check.h"

namespace cohort::examples::char_lm {

namespace {

// How a parameter starts (see InitOptions).
enum class Init { normal, residual_out, zero, one };

struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init;
  double std = 0.02;
  int stage_of_owner = 0;
};

std::string block_name(int64_t i) { return "block" + std::to_string(i); }

// Every parameter of the model with its shape, initialisation and stage,
// in one place so that the stage modules and full_parameters() agree.
std::vector<ParameterSpec> parameter_specs(const ModelShape& s, int stages) {
  const int64_t d = s.d_model;
  const double residual_std = 0.02 / std::sqrt(2.0 * double(s.layers));
  std::vector<ParameterSpec> out;
  out.push_back({"embedding.tokens.weight", {s.vocab, d}, Init::normal, 0.02, 0});
  out.push_back({"embedding.positions", {s.seq_len, d}, Init::normal, 0.01, 0});
  for (int stage = 0; stage < stages; ++stage) {
    const BlockRange r = stage_blocks(s.layers, stages, stage);
    for (int64_t i = r.begin; i < r.end; ++i) {
      const std::string b = block_name(i) + ".";
      out.push_back({b + "ln1.weight", {d}, Init::one, 0, stage});
      out.push_back({b + "ln1.bias", {d}, Init::zero, 0, stage});
      out.push_back({b + "attn.qkv.weight", {3 * d, d}, Init::normal, 0.02, stage});
      out.push_back({b + "attn.qkv.bias", {3 * d}, Init::zero, 0, stage});
      out.push_back({b + "attn.proj.weight", {d, d}, Init::residual_out, residual_std, stage});
      out.push_back({b + "attn.proj.bias", {d}, Init::zero, 0, stage});
      out.push_back({b + "ln2.weight", {d}, Init::one, 0, stage});
      out.push_back({b + "ln2.bias", {d}, Init::zero, 0, stage});
      out.push_back({b + "mlp.fc.weight", {4 * d, d}, Init::normal, 0.02, stage});
      out.push_back({b + "mlp.fc.bias", {4 * d}, Init::zero, 0, stage});
      out.push_back({b + "mlp.proj.weight", {d, 4 * d}, Init::residual_out, residual_std, stage});
      out.push_back({b + "mlp.proj.bias", {d}, Init::zero, 0, stage});
    }
  }
  out.push_back({"head.ln_f.weight", {d}, Init::one, 0, stages - 1});
  out.push_back({"head.ln_f.bias", {d}, Init::zero, 0, stages - 1});
  out.push_back({"head.lm_head.weight", {s.vocab, d}, Init::normal, 0.02, stages - 1});
  return out;
}

// A per-parameter seed: FNV-1a of the name mixed with the run's seed, so a
// parameter's values depend on nothing but (seed, name, shape).
uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h ^ (seed * 0x9e3779b97f4a7c15ULL);
}

at::Tensor draw(const ParameterSpec& p, const InitOptions& o) {
  at::Generator gen = at::detail::createCPUGenerator(parameter_seed(o.seed, p.name));
  // Drawn in float64 so the values do not depend on the dtype beyond rounding.
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor t;
  switch (p.init) {
    case Init::normal:
    case Init::residual_out:
      t = at::empty(p.shape, f64).normal_(0.0, p.std, gen);
      break;
    case Init::zero:
      t = o.perturb ? at::empty(p.shape, f64).normal_(0.0, 0.1, gen) : at::zeros(p.shape, f64);
      break;
    case Init::one:
      t = o.perturb ? at::empty(p.shape, f64).normal_(1.0, 0.1, gen) : at::ones(p.shape, f64);
      break;
  }
  return t.to(o.dtype);
}

void check_shape(const ModelShape& s) {
  COHORT_CHECK_AS(ConfigError, s.vocab >= 1 && s.d_model >= 1 && s.heads >= 1 && s.layers >= 1 && s.seq_len >= 1)
      << "char_lm model: vocab, d_model, heads, layers and seq_len must be positive";
  COHORT_CHECK_AS(ConfigError, s.d_model % s.heads == 0)
      << "char_lm model: d_model " << s.d_model << " is not a multiple of heads " << s.heads;
}

// Causal self-attention over (B, T, heads * head_dim) queries, keys, values.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t heads) {
  const int64_t B = q.size(0), T = q.size(1), hd = q.size(2) / heads;
  auto split = [&](const at::Tensor& x) { return x.reshape({B, T, heads, hd}).transpose(1, 2); };
  at::Tensor scores = at::matmul(split(q), split(k).transpose(-2, -1)) / std::sqrt(double(hd));
  const at::Tensor future = at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), split(v)).transpose(1, 2).reshape({B, T, heads * hd});
}

}  // namespace

BlockRange stage_blocks(int64_t layers, int stages, int stage) {
  COHORT_CHECK_AS(ConfigError, stages >= 1 && stage >= 0 && stage < stages && layers >= stages)
      << "cannot split " << layers << " blocks over " << stages << " stages (stage " << stage << ")";
  const int64_t base = layers / stages, extra = layers % stages;
  const int64_t begin = stage * base + std::min<int64_t>(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

FullParameters full_parameters(const ModelShape& shape, const InitOptions& options, int stages, int only_stage) {
  check_shape(shape);
  FullParameters out;
  for (const auto& p : parameter_specs(shape, stages))
    if (only_stage < 0 || p.stage_of_owner == only_stage) out.emplace(p.name, draw(p, options));
  return out;
}

LmStageImpl::LmStageImpl(const ModelShape& shape, const StageOptions& options)
    : shape_(shape), options_(options), blocks_(stage_blocks(shape.layers, options.stages, options.stage)) {
  check_shape(shape);
  // The weights these pieces draw are replaced by full_parameters()' (see
  // ParallelLm); only their structure matters here.
  const cohort::models::GptOptions gpt{.vocab_size = shape.vocab,
                           .max_seq_len = shape.seq_len,
                           .d_model = shape.d_model,
                           .n_layers = shape.layers,
                           .n_heads = shape.heads,
                           .dtype = options.dtype,
                           .engine = options.tp_engine};
  if (first()) embedding_ = register_module("embedding", cohort::models::GptEmbedding(gpt));
  for (int64_t i = blocks_.begin; i < blocks_.end; ++i)
    block_list_.push_back(
        register_module(block_name(i), cohort::models::TransformerBlock(shape.d_model, cohort::models::gpt_block_options(gpt, i))));
  if (last()) head_ = register_module("head", cohort::models::GptHead(gpt));
}

at::Tensor LmStageImpl::forward(const at::Tensor& input) {
  at::Tensor h;
  if (first()) {
    COHORT_CHECK_AS(ConfigError, input.dim() == 2 && input.scalar_type() == at::kLong)
        << "char_lm stage 0: input must be int64 ids (batch, time), got " << input.sizes() << " "
        << input.scalar_type();
    h = embedding_->forward(input);
  } else {
    h = input;
  }
  for (auto& block : block_list_) h = block->forward(h);
  return last() ? head_->forward(h) : h;
}

at::Tensor LmStageImpl::loss(const at::Tensor& local_logits, const at::Tensor& targets) {
  COHORT_CHECK_AS(ConfigError, last()) << "char_lm: loss() on stage " << options_.stage << " of "
                                       << options_.stages << ", not the last";
  return head_->loss(local_logits, targets);
}

at::Tensor dense_logits(const FullParameters& p, const ModelShape& s, const at::Tensor& ids) {
  check_shape(s);
  auto at_ = [&](const std::string& name) -> const at::Tensor& {
    auto it = p.find(name);
    COHORT_CHECK_AS(ConfigError, it != p.end()) << "char_lm dense model: no parameter '" << name << "'";
    return it->second;
  };
  auto ln = [&](const at::Tensor& x, const std::string& name) {
    return at::layer_norm(x, {s.d_model}, at_(name + ".weight"), at_(name + ".bias"));
  };
  const int64_t T = ids.size(1);
  at::Tensor h = at::embedding(at_("embedding.tokens.weight"), ids) + at_("embedding.positions").narrow(0, 0, T);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string b = block_name(i) + ".";
    const std::vector<at::Tensor> qkv =
        at::linear(ln(h, b + "ln1"), at_(b + "attn.qkv.weight"), at_(b + "attn.qkv.bias")).chunk(3, -1);
    h = h + at::linear(causal_attention(qkv[0], qkv[1], qkv[2], s.heads), at_(b + "attn.proj.weight"),
                       at_(b + "attn.proj.bias"));
    const at::Tensor m = at::gelu(at::linear(ln(h, b + "ln2"), at_(b + "mlp.fc.weight"), at_(b + "mlp.fc.bias")));
    h = h + at::linear(m, at_(b + "mlp.proj.weight"), at_(b + "mlp.proj.bias"));
  }
  return at::linear(ln(h, "head.ln_f"), at_("head.lm_head.weight"));
}

at::Tensor dense_loss(const FullParameters& p, const ModelShape& s, const at::Tensor& ids, const at::Tensor& targets) {
  const at::Tensor logits = dense_logits(p, s, ids);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace cohort::examples::char_lm
