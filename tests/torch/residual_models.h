// Two models of a program's own, as a user writes them: modules with
// members and a custom forward (not a torch::nn::Sequential), built in
// reset() so that they are torch::nn::Cloneable (mirrored's replicas). Each
// can mark its layers for DP-SGD's kernels (cohort::PerSample) and its
// blocks as ZeRO stage 3's units (cohort::ShardedUnit), so one class runs
// under every strategy:
//
//   ResidualCnn      conv stem, GroupNorm, residual blocks (conv, GroupNorm,
//                    skip connection, an in-place relu on a wrapped layer's
//                    output), global average pooling, Linear head;
//   TinyTransformer  token Embedding plus a positional parameter of the
//                    model's own (outside every PerSample), pre-norm blocks
//                    of multi-head attention (q/k/v/o Linear on [B, T, D])
//                    and a GELU MLP with residuals, LayerNorm, Linear head
//                    on the mean over positions; optionally one block run
//                    twice (weight sharing).
//
// Used by the strategy and privacy tests and by bench/dp_sgd.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "cohort/torch/data_parallel/sharded_unit.h"
#include "cohort/torch/privacy/per_sample_module.h"

namespace cohort::testing {

struct Wrapping {
  bool per_sample = true;  // layers in cohort::PerSample
  bool sharded = false;    // blocks in cohort::ShardedUnit
  bool wrap_head = true;   // false: the head stays outside every PerSample
};

// `module` registered as `name` of `owner`, inside a `Wrapper` when `wrap`.
template <typename Wrapper, typename Holder>
torch::nn::AnyModule add_module(torch::nn::Module& owner, const std::string& name, Holder module, bool wrap) {
  if (wrap) return torch::nn::AnyModule(owner.register_module(name, Wrapper(module)));
  return torch::nn::AnyModule(owner.register_module(name, module));
}

// ---- the residual CNN ----

struct ResidualCnnOptions {
  int64_t channels = 4;
  int64_t groups = 2;  // of every GroupNorm
  int64_t stem_stride = 1;
  int blocks = 2;
  int64_t classes = 3;
  bool reflect_stem = false;  // the stem pads by reflection: no kernel, its own micro-batches
  Wrapping wrapping;
  torch::Dtype dtype = torch::kFloat64;
};

class ResidualBlockImpl : public torch::nn::Cloneable<ResidualBlockImpl> {
 public:
  ResidualBlockImpl(int64_t channels, int64_t groups, bool per_sample)
      : channels_(channels), groups_(groups), per_sample_(per_sample) {
    reset();
  }
  void reset() override {
    namespace nn = torch::nn;
    const auto conv = [this] { return nn::Conv2d(nn::Conv2dOptions(channels_, channels_, 3).padding(1)); };
    conv1_ = add_module<PerSample>(*this, "conv1", conv(), per_sample_);
    norm1_ = add_module<PerSample>(*this, "norm1", nn::GroupNorm(groups_, channels_), per_sample_);
    conv2_ = add_module<PerSample>(*this, "conv2", conv(), per_sample_);
    norm2_ = add_module<PerSample>(*this, "norm2", nn::GroupNorm(groups_, channels_), per_sample_);
  }
  at::Tensor forward(const at::Tensor& x) {
    // In place on a wrapped layer's output: the private step must take the
    // gradient where the layer gave it, not after the relu.
    at::Tensor h = norm1_.forward(conv1_.forward(x)).relu_();
    h = norm2_.forward(conv2_.forward(h));
    return torch::relu(x + h);
  }

 private:
  int64_t channels_, groups_;
  bool per_sample_;
  torch::nn::AnyModule conv1_, norm1_, conv2_, norm2_;
};
TORCH_MODULE(ResidualBlock);

class ResidualCnnImpl : public torch::nn::Cloneable<ResidualCnnImpl> {
 public:
  explicit ResidualCnnImpl(ResidualCnnOptions options = {}) : options_(options) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    const Wrapping& w = options_.wrapping;
    auto stem = nn::Conv2dOptions(1, options_.channels, 3).stride(options_.stem_stride).padding(1);
    if (options_.reflect_stem) stem.padding_mode(torch::kReflect);
    stem_ = add_module<PerSample>(*this, "stem", nn::Conv2d(stem), w.per_sample);
    stem_norm_ =
        add_module<PerSample>(*this, "stem_norm", nn::GroupNorm(options_.groups, options_.channels), w.per_sample);
    blocks_.clear();
    for (int i = 0; i < options_.blocks; ++i)
      blocks_.push_back(add_module<ShardedUnit>(*this, "block" + std::to_string(i),
                                                ResidualBlock(options_.channels, options_.groups, w.per_sample),
                                                w.sharded));
    head_ = add_module<PerSample>(*this, "head", nn::Linear(options_.channels, options_.classes),
                                  w.per_sample && w.wrap_head);
    to(options_.dtype);
  }
  at::Tensor forward(const at::Tensor& images) {
    at::Tensor x = torch::relu(stem_norm_.forward(stem_.forward(images)));
    for (auto& block : blocks_) x = block.forward(x);
    return head_.forward(x.mean({2, 3}));
  }

 private:
  ResidualCnnOptions options_;
  torch::nn::AnyModule stem_, stem_norm_, head_;
  std::vector<torch::nn::AnyModule> blocks_;
};
TORCH_MODULE(ResidualCnn);

// ---- the transformer ----

struct TinyTransformerOptions {
  int64_t vocab = 11;
  int64_t positions = 5;
  int64_t dim = 8;
  int64_t heads = 2;
  int blocks = 2;
  int64_t classes = 3;
  bool shared_block = false;  // one block, run `blocks` times (its PerSamples called that often)
  Wrapping wrapping;
  torch::Dtype dtype = torch::kFloat64;
};

class AttentionBlockImpl : public torch::nn::Cloneable<AttentionBlockImpl> {
 public:
  AttentionBlockImpl(int64_t dim, int64_t heads, bool per_sample) : dim_(dim), heads_(heads), per_sample_(per_sample) {
    reset();
  }
  void reset() override {
    namespace nn = torch::nn;
    const auto norm = [this] { return nn::LayerNorm(nn::LayerNormOptions({dim_})); };
    ln1_ = add_module<PerSample>(*this, "ln1", norm(), per_sample_);
    q_ = add_module<PerSample>(*this, "q", nn::Linear(dim_, dim_), per_sample_);
    k_ = add_module<PerSample>(*this, "k", nn::Linear(dim_, dim_), per_sample_);
    v_ = add_module<PerSample>(*this, "v", nn::Linear(dim_, dim_), per_sample_);
    out_ = add_module<PerSample>(*this, "out", nn::Linear(dim_, dim_), per_sample_);
    ln2_ = add_module<PerSample>(*this, "ln2", norm(), per_sample_);
    fc1_ = add_module<PerSample>(*this, "fc1", nn::Linear(dim_, 2 * dim_), per_sample_);
    fc2_ = add_module<PerSample>(*this, "fc2", nn::Linear(2 * dim_, dim_), per_sample_);
  }
  // x [B, T, D].
  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = dim_ / heads_;
    const at::Tensor h = ln1_.forward(x);
    const auto split = [&](const at::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
    const at::Tensor q = split(q_.forward(h)), k = split(k_.forward(h)), v = split(v_.forward(h));
    const at::Tensor attention = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(d)), -1);
    const at::Tensor mixed = torch::matmul(attention, v).transpose(1, 2).reshape({b, t, dim_});
    const at::Tensor y = x + out_.forward(mixed);
    return y + fc2_.forward(torch::gelu(fc1_.forward(ln2_.forward(y))));
  }

 private:
  int64_t dim_, heads_;
  bool per_sample_;
  torch::nn::AnyModule ln1_, q_, k_, v_, out_, ln2_, fc1_, fc2_;
};
TORCH_MODULE(AttentionBlock);

class TinyTransformerImpl : public torch::nn::Cloneable<TinyTransformerImpl> {
 public:
  explicit TinyTransformerImpl(TinyTransformerOptions options = {}) : options_(options) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    const Wrapping& w = options_.wrapping;
    embed_ = add_module<PerSample>(*this, "embed", nn::Embedding(options_.vocab, options_.dim), w.per_sample);
    position_ = register_parameter("position", 0.1 * torch::randn({options_.positions, options_.dim}));
    blocks_.clear();
    for (int i = 0; i < (options_.shared_block ? 1 : options_.blocks); ++i)
      blocks_.push_back(add_module<ShardedUnit>(*this, "block" + std::to_string(i),
                                                AttentionBlock(options_.dim, options_.heads, w.per_sample), w.sharded));
    head_ =
        add_module<PerSample>(*this, "head", nn::Linear(options_.dim, options_.classes), w.per_sample && w.wrap_head);
    to(options_.dtype);
  }
  // tokens [B, T] int64.
  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = embed_.forward(tokens) + position_;
    for (int i = 0; i < options_.blocks; ++i) x = blocks_[options_.shared_block ? 0 : size_t(i)].forward(x);
    return head_.forward(x.mean(1));
  }

 private:
  TinyTransformerOptions options_;
  torch::nn::AnyModule embed_, head_;
  at::Tensor position_;
  std::vector<torch::nn::AnyModule> blocks_;
};
TORCH_MODULE(TinyTransformer);

}  // namespace cohort::testing
