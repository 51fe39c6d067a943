// DP-SGD as a strategy (cohort/torch/privacy/private_strategy.h), against
// independent references:
// - sigma = 0 and C = infinity: the private strategy trains exactly as the
//   plain one (fixed batches), on the kernel path and the micro-batch path;
// - the clipped step equals a float64 loop of one-sample backward passes,
//   each gradient clipped (flat and per layer) and averaged;
// - Poisson sampling through fit() at 1, 2 and 3 ranks, with steps where
//   some ranks or all have no rows: no hang, and the same model at every
//   rank count (designated noise: one draw per step, whatever the ranks);
// - the budget (epsilon) that fit() logs equals the accountant's for the
//   steps taken, survives save and resume at another rank count, and
//   make_private_with_epsilon meets its target;
// - layers without a kernel (a custom module, reflect padding, a frozen
//   bias) take their own micro-batches inside a Sequential, whose layers
//   may also be PerSamples or hold them: the clipped step still equals the
//   loop;
// - tensor-parallel layers (tp = 1, 2): each rank's clipped step is its
//   slice of the full model's loop; shards get independent noise and
//   replicated parameters the same noise on every rank;
// - models of the program's own (tests/torch/residual_models.h: a residual
//   CNN, a transformer) with cohort::PerSample layers inside ShardedUnit
//   blocks, a layer without a kernel and parameters outside every
//   PerSample, one block run twice: each step equals the float64 loop, over
//   one_device and multi_worker at 2 ranks, flat and per layer, in float64
//   and float32, and the gradient path is described layer by layer;
// - refusals: BatchNorm (named, GroupNorm suggested), mirrored, a saved
//   state without a privacy record, bad options, tensor-parallel layers over
//   several data-parallel processes or outside a Sequential, nested
//   PerSamples, a PerSample's weights used outside it, the batch folded, a
//   PerSample's input modified in place after it ran.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "cohort/common/error.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/privacy/accountant.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/fit/backup_and_restore.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/privacy/private_strategy.h"
#include "cohort/torch/strategy/mirrored.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/torch/residual_models.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::privacy_strategy_test {
namespace {

namespace nn = torch::nn;
using privacy::Clipping;
using privacy::PrivacyOptions;
using privacy::PrivateStrategy;

constexpr int64_t kClasses = 3;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Conv2d, GroupNorm and Linear: every layer on the kernel path.
nn::Sequential make_sequential() {
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::GroupNorm(2, 4), nn::ReLU(),
                     nn::Flatten(), nn::Linear(4 * 5 * 5, 6), nn::Tanh(), nn::Linear(6, kClasses));
  net->to(torch::kFloat64);
  return net;
}

// Not a Sequential: the micro-batch path.
struct CustomNetImpl : nn::Module {
  CustomNetImpl() {
    fc1 = register_module("fc1", nn::Linear(25, 5));
    fc2 = register_module("fc2", nn::Linear(5, kClasses));
    to(torch::kFloat64);
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::tanh(fc1(x.flatten(1)))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(CustomNet);

std::pair<at::Tensor, at::Tensor> make_data(int64_t n, int64_t side = 5) {
  auto g = at::detail::createCPUGenerator(99);
  return {at::randn({n, 1, side, side}, g, torch::kFloat64), at::randint(kClasses, {n}, g, torch::kInt64)};
}

// Gives `net` the parameters `init` (so every rank and the reference start
// alike without racing on the global generator).
template <typename Net>
Net with_parameters(Net net, const std::vector<at::Tensor>& init) {
  torch::NoGradGuard no_grad;
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
  return net;
}

std::vector<at::Tensor> initial_parameters(nn::Module& net) {
  std::vector<at::Tensor> out;
  for (const auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

OptimizerFactory sgd(double lr) { return optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(lr)); }

template <typename Net>
at::Tensor train_steps(Strategy& strategy, Net net, const OptimizerFactory& optimizer, int steps, int64_t batch) {
  strategy.prepare(training_model(net, cross_entropy, optimizer));
  const auto [x, y] = make_data(batch * steps);
  for (int s = 0; s < steps; ++s)
    strategy.train_step({x.narrow(0, s * batch, batch), y.narrow(0, s * batch, batch)}, batch);
  return flat_parameters(strategy.module());
}

template <typename Net>
void expect_private_equals_plain(Net (*make)()) {
  torch::set_num_threads(1);
  const auto init = initial_parameters(*make());
  for (const char* optimizer : {"sgd", "adam"}) {
    const OptimizerFactory factory = std::string(optimizer) == "sgd"
                                         ? optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))
                                         : optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(0.01));
    OneDeviceStrategy plain;
    const at::Tensor expected = train_steps(plain, with_parameters(make(), init), factory, 4, 7);
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(),
                       {.noise_multiplier = 0, .max_grad_norm = kInf, .sample_rate = 0.5, .poisson = false});
    const at::Tensor got = train_steps(dp, with_parameters(make(), init), factory, 4, 7);
    EXPECT_TRUE(torch::allclose(got, expected, 1e-10, 1e-12))
        << optimizer << ": max difference " << (got - expected).abs().max().item<double>();
  }
}

TEST(PrivateStrategy, WithoutNoiseOrClippingEqualsPlainTrainingOnTheKernelPath) {
  ASSERT_EQ(privacy::gradient_path(*make_sequential()), privacy::GradientPath::kernels);
  expect_private_equals_plain(&make_sequential);
}

TEST(PrivateStrategy, WithoutNoiseOrClippingEqualsPlainTrainingOnTheMicroBatchPath) {
  ASSERT_EQ(privacy::gradient_path(*CustomNet()), privacy::GradientPath::micro_batches);
  expect_private_equals_plain(+[] { return CustomNet(); });
}

// The float64 reference of one DP-SGD step without noise: per-sample
// gradients by one backward pass each, clipped flat or per layer (a layer
// being a module with parameters of its own), averaged over the batch.
std::vector<at::Tensor> reference_clipped_mean(nn::Module& net, const ForwardFn& forward, const at::Tensor& x,
                                               const at::Tensor& y, double c, Clipping clipping) {
  std::vector<std::vector<at::Tensor>> layers;  // each layer's parameters
  for (const auto& m : net.modules(/*include_self=*/true)) {
    std::vector<at::Tensor> own;
    for (const auto& p : m->parameters(/*recurse=*/false))
      if (p.requires_grad()) own.push_back(p);
    if (!own.empty()) layers.push_back(own);
  }
  std::vector<at::Tensor> params;
  for (const auto& p : net.parameters())
    if (p.requires_grad()) params.push_back(p);
  std::vector<at::Tensor> sum;
  for (const auto& p : params) sum.push_back(torch::zeros_like(p));
  for (int64_t i = 0; i < x.size(0); ++i) {
    const at::Tensor loss = cross_entropy(forward(net, x.narrow(0, i, 1)), y.narrow(0, i, 1));
    const auto grads = torch::autograd::grad({loss}, params);
    std::map<const void*, double> factor;  // parameter -> its clipping factor
    if (clipping == Clipping::flat) {
      double sq = 0;
      for (const auto& g : grads) sq += g.pow(2).sum().item<double>();
      for (const auto& p : params) factor[p.unsafeGetTensorImpl()] = std::min(1.0, c / (std::sqrt(sq) + 1e-6));
    } else {
      const double layer_c = c / std::sqrt(double(layers.size()));
      for (const auto& layer : layers) {
        double sq = 0;
        for (const auto& p : layer)
          for (size_t k = 0; k < params.size(); ++k)
            if (params[k].is_same(p)) sq += grads[k].pow(2).sum().item<double>();
        for (const auto& p : layer) factor[p.unsafeGetTensorImpl()] = std::min(1.0, layer_c / (std::sqrt(sq) + 1e-6));
      }
    }
    for (size_t k = 0; k < params.size(); ++k) sum[k] += grads[k] * factor.at(params[k].unsafeGetTensorImpl());
  }
  for (auto& s : sum) s /= double(x.size(0));
  return sum;
}

// Clipping to c, no noise, fixed batches.
PrivacyOptions clipping_only(double c, Clipping clipping) {
  return {.noise_multiplier = 0, .max_grad_norm = c, .clipping = clipping, .sample_rate = 0.5, .poisson = false};
}

// One private step (lr 1, no noise) of `make()`'s model against
// reference_clipped_mean on a copy, flat and per layer, C small and large.
void expect_clipped_step_equals_loop(const std::function<nn::Sequential()>& make, int64_t side = 5) {
  torch::set_num_threads(1);
  const auto [x, y] = make_data(9, side);
  for (const Clipping clipping : {Clipping::flat, Clipping::per_layer})
    for (const double c : {0.05, 0.5}) {
      nn::Sequential net = make();
      const auto before = initial_parameters(*net);
      nn::Sequential copy = with_parameters(make(), before);
      const TrainingModel model = training_model(copy, cross_entropy, sgd(1.0));
      const auto expected = reference_clipped_mean(*copy, model.forward, x, y, c, clipping);

      PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), clipping_only(c, clipping));
      dp.prepare(training_model(net, cross_entropy, sgd(1.0)));
      ASSERT_NE(dp.gradient_path(), privacy::GradientPath::micro_batches);
      dp.train_step({x, y}, x.size(0));
      const auto after = net->parameters();
      size_t trained = 0;
      for (size_t k = 0; k < after.size(); ++k) {
        if (!after[k].requires_grad()) {
          EXPECT_TRUE(torch::equal(after[k], before[k])) << "frozen parameter " << k << " moved";
          continue;
        }
        const at::Tensor step = before[k] - after[k];  // lr 1: the averaged clipped gradient
        EXPECT_TRUE(torch::allclose(step, expected[trained], 1e-9, 1e-12))
            << "clipping " << int(clipping) << " C " << c << " parameter " << k << ": max difference "
            << (step - expected[trained]).abs().max().item<double>();
        ++trained;
      }
      EXPECT_EQ(trained, expected.size());
    }
}

TEST(PrivateStrategy, ClippedStepEqualsAFloat64PerSampleLoop) { expect_clipped_step_equals_loop(&make_sequential); }

// An elementwise scale with parameters of its own: no per_sample.h kernel.
struct ScaleImpl : nn::Module {
  explicit ScaleImpl(int64_t features) { weight = register_parameter("weight", torch::linspace(0.5, 1.5, features)); }
  at::Tensor forward(const at::Tensor& x) { return x * weight; }
  at::Tensor weight;
};
TORCH_MODULE(Scale);

// Layers the kernels do not cover, inside a Sequential: a convolution with
// reflect padding, a Linear whose bias is frozen and a custom module. Each
// takes its own micro-batches; the other layers keep their kernels.
nn::Sequential make_sequential_with_fallback_layers() {
  nn::Linear frozen_bias(4 * 5 * 5, 6);
  frozen_bias->bias.set_requires_grad(false);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1).padding_mode(torch::kReflect)),
                     nn::GroupNorm(2, 4), nn::ReLU(), nn::Flatten(), frozen_bias, nn::Tanh(), Scale(6),
                     nn::Linear(6, kClasses));
  net->to(torch::kFloat64);
  return net;
}

TEST(PrivateStrategy, LayersWithoutKernelsTakeTheirOwnMicroBatchesInsideASequential) {
  expect_clipped_step_equals_loop(&make_sequential_with_fallback_layers);
}

// A block holding a PerSample and a parameter of its own (outside every
// watched layer).
struct ScaledLinearImpl : nn::Module {
  ScaledLinearImpl(int64_t in, int64_t out) {
    fc = register_module("fc", PerSample(nn::Linear(in, out)));
    scale = register_parameter("scale", torch::linspace(0.5, 1.5, out));
  }
  at::Tensor forward(const at::Tensor& x) { return fc(x) * scale; }
  PerSample fc{nullptr};
  at::Tensor scale;
};
TORCH_MODULE(ScaledLinear);

// A Sequential whose layers are wrapped, plain, or a block with a wrapped
// layer inside: the step watches the plain ones itself, the PerSamples
// record themselves, the block's own parameter takes whole-model
// micro-batches.
nn::Sequential make_sequential_with_per_sample_layers() {
  nn::Sequential net(PerSample(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1))), nn::GroupNorm(2, 4), nn::ReLU(),
                     nn::Flatten(), ScaledLinear(4 * 5 * 5, 6), nn::Tanh(), PerSample(nn::Linear(6, kClasses)));
  net->to(torch::kFloat64);
  return net;
}

TEST(PrivateStrategy, PerSampleLayersInsideASequential) {
  EXPECT_EQ(privacy::describe_gradient_path(*make_sequential_with_per_sample_layers()),
            "kernels: 4 layers; whole-model micro-batches (a forward per sample) for 1 unwrapped parameter: 4.scale "
            "(move 4.scale into a layer wrapped in cohort::PerSample)");
  expect_clipped_step_equals_loop(&make_sequential_with_per_sample_layers);
}

// The example's DP network (strided 8x8 and 4x4 convolutions, stride-1
// pooling, tanh) on 28x28 images.
TEST(PrivateStrategy, TheExamplesPrivateNetworkIsOnTheKernelPathAndEqualsTheLoop) {
  expect_clipped_step_equals_loop(
      [] {
        nn::Sequential net = models::fashion_mnist_classifier("tanh_cnn");
        net->to(torch::kFloat64);
        return net;
      },
      28);
}

// ---- models of the program's own: PerSample layers (residual_models.h) ----

// The expected update of each of `steps` DP-SGD steps (lr 1, clipping to
// c, no noise) of `net` on consecutive batches of `batch` rows, each the
// float64 loop's clipped mean from the parameters the previous steps left,
// flattened.
std::vector<at::Tensor> loop_updates(nn::Module& net, const ForwardFn& forward, const at::Tensor& x,
                                     const at::Tensor& y, int64_t batch, int steps, double c, Clipping clipping) {
  std::vector<at::Tensor> updates;
  for (int s = 0; s < steps; ++s) {
    const auto mean =
        reference_clipped_mean(net, forward, x.narrow(0, s * batch, batch), y.narrow(0, s * batch, batch), c, clipping);
    std::vector<at::Tensor> flat;
    for (const auto& g : mean) flat.push_back(g.reshape({-1}));
    updates.push_back(torch::cat(flat));
    torch::NoGradGuard no_grad;
    const auto params = net.parameters();
    for (size_t k = 0; k < params.size(); ++k) params[k].sub_(mean[k]);
  }
  return updates;
}

// `steps` private steps (lr 1, clipping to c, no noise) of `make(true)`'s
// model at `ranks` ranks (one_device at 1, multi_worker at 2, each rank its
// half of every batch), each step's gradient against the float64 loop's
// update on `make(false)`'s model (no wrapper, float64, the same initial
// parameters): largest difference over the largest element at most
// `tolerance`. Per-layer clipping's layers are the loop's modules with
// parameters of their own: here each PerSample's layer, and the parameters
// outside them in one module. Returns the gradient path's description.
template <typename Net>
std::string expect_private_steps_equal_the_loop(const std::function<Net(bool wrapped)>& make, const at::Tensor& x,
                                                const at::Tensor& y, int ranks, double tolerance,
                                                Clipping clipping = Clipping::flat) {
  const int64_t batch = 6;
  const int steps = int(x.size(0) / batch);
  const double c = 0.05;  // small: most samples are scaled to their own norm
  const auto init = seeded(21, [&] { return initial_parameters(*make(true)); });
  Net reference = make(false);
  reference->to(torch::kFloat64);
  with_parameters(reference, init);
  const TrainingModel model = training_model(reference, cross_entropy, sgd(1.0));
  const auto expected = loop_updates(*reference, model.forward, x.is_floating_point() ? x.to(torch::kFloat64) : x, y,
                                     batch, steps, c, clipping);
  PerRank<std::string> description(ranks);
  run_torch_ranks(ranks, [&](int rank, int size) {
    std::unique_ptr<Strategy> inner;
    if (size == 1) inner = std::make_unique<OneDeviceStrategy>();
    else inner = std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
    auto dp = privacy::make_private(std::move(inner), clipping_only(c, clipping));
    dp->prepare(training_model(with_parameters(make(true), init), cross_entropy, sgd(1.0)));
    description.add(rank, dp->gradient_path_description());
    const int64_t mine = batch / size;
    for (int s = 0; s < steps; ++s) {
      const int64_t first = s * batch + rank * mine;
      dp->train_step({x.narrow(0, first, mine), y.narrow(0, first, mine)}, batch);
      // The gradient the step took (lr 1), as the strategy left it in
      // .grad(): a float32 parameter's own rounding would hide it.
      std::vector<at::Tensor> grads;
      for (const auto& p : dp->module().parameters()) grads.push_back(p.grad().reshape({-1}).to(torch::kFloat64));
      const at::Tensor update = torch::cat(grads);
      const at::Tensor& want = expected[size_t(s)];
      const double error = ((update - want).abs().max() / want.abs().max()).item<double>();
      COHORT_CHECK(error <= tolerance) << ranks << " ranks, rank " << rank << ", step " << s << ": the update differs "
                                       << "from the loop's by " << error << " of its largest element";
    }
  });
  return description.of(0).at(0);
}

at::Tensor tokens(int64_t n, int64_t vocab, int64_t positions) {
  auto g = at::detail::createCPUGenerator(7);
  return at::randint(vocab, {n, positions}, g, torch::kInt64);
}

// The residual CNN with its layers in PerSample and its blocks in
// ShardedUnit; the stem pads by reflection (no kernel: its own
// micro-batches) and the head is left unwrapped (whole-model micro-batches).
ResidualCnn private_cnn(bool wrapped, torch::Dtype dtype) {
  return ResidualCnn(ResidualCnnOptions{.reflect_stem = true,
                                        .wrapping = {.per_sample = wrapped, .sharded = wrapped, .wrap_head = false},
                                        .dtype = dtype});
}

TEST(PrivateStrategy, AResidualCnnWithPerSampleLayersStepsAsTheLoop) {
  const auto [x, y] = make_data(12, 6);
  for (const int ranks : {1, 2}) {
    const std::string path = expect_private_steps_equal_the_loop<ResidualCnn>(
        [](bool wrapped) { return private_cnn(wrapped, torch::kFloat64); }, x, y, ranks, 1e-10);
    EXPECT_EQ(path,
              "kernels: 9 layers; layer micro-batches: stem (Conv2d with reflect padding); whole-model micro-batches "
              "(a forward per sample) for 2 unwrapped parameters: head.weight, head.bias (wrap head in "
              "cohort::PerSample)");
  }
  expect_private_steps_equal_the_loop<ResidualCnn>([](bool wrapped) { return private_cnn(wrapped, torch::kFloat64); },
                                                   x, y, 1, 1e-10, Clipping::per_layer);
  // float32: the kernels compute in float32 and the loop in float64 (the
  // plain float32 gradient of this model is within about 3e-7 of float64's).
  expect_private_steps_equal_the_loop<ResidualCnn>([](bool wrapped) { return private_cnn(wrapped, torch::kFloat32); },
                                                   x.to(torch::kFloat32), y, 1, 2e-6);
  EXPECT_EQ(privacy::gradient_path(*private_cnn(true, torch::kFloat64)), privacy::GradientPath::mixed);
  EXPECT_EQ(privacy::gradient_path_name(privacy::GradientPath::mixed), "mixed");
}

// The transformer: q/k/v/o, MLP and head Linear on [B, T, D], LayerNorm and
// the Embedding in PerSample, the positional parameter outside; its blocks
// in ShardedUnit, or one block run twice (its Linear calls joined along the
// positions, its LayerNorms by their own micro-batches over both calls).
TEST(PrivateStrategy, ATransformerWithPerSampleLayersStepsAsTheLoop) {
  const TinyTransformerOptions shape;
  const at::Tensor x = tokens(12, shape.vocab, shape.positions);
  const at::Tensor y = make_data(12).second;
  for (const int ranks : {1, 2}) {
    const std::string path = expect_private_steps_equal_the_loop<TinyTransformer>(
        [](bool wrapped) {
          return TinyTransformer(TinyTransformerOptions{.wrapping = {.per_sample = wrapped, .sharded = wrapped}});
        },
        x, y, ranks, 1e-10, ranks == 1 ? Clipping::flat : Clipping::per_layer);
    EXPECT_EQ(path,
              "kernels: 18 layers; whole-model micro-batches (a forward per sample) for 1 unwrapped parameter: "
              "position (move position into a layer wrapped in cohort::PerSample)");
  }
  expect_private_steps_equal_the_loop<TinyTransformer>(
      [](bool wrapped) {
        return TinyTransformer(TinyTransformerOptions{.shared_block = true, .wrapping = {.per_sample = wrapped}});
      },
      x, y, 1, 1e-10);
}

template <typename Impl>
std::string refusal_of(nn::ModuleHolder<Impl> net, const at::Tensor& x) {
  return config_error([&] {
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), clipping_only(1.0, Clipping::flat));
    dp.prepare(training_model(net, cross_entropy, sgd(0.1)));
    dp.train_step({x, torch::zeros({x.size(0)}, torch::kInt64)}, x.size(0));
  });
}

// A PerSample inside a PerSample.
struct NestedImpl : nn::Module {
  NestedImpl() { outer = register_module("outer", PerSample(nn::Sequential(PerSample(nn::Linear(4, kClasses))))); }
  at::Tensor forward(const at::Tensor& x) { return outer(x); }
  PerSample outer{nullptr};
};

// The wrapped layer's weight also used by hand (a tied projection).
struct TiedByHandImpl : nn::Module {
  TiedByHandImpl() { fc = register_module("fc", PerSample(nn::Linear(4, 4))); }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor& weight = fc->module().as<nn::Linear>()->weight;
    return torch::linear(torch::tanh(fc(x)), weight).narrow(1, 0, kClasses);
  }
  PerSample fc{nullptr};
};

// Positions folded into the batch before a wrapped Linear.
struct FoldedImpl : nn::Module {
  FoldedImpl() { fc = register_module("fc", PerSample(nn::Linear(4, kClasses))); }
  at::Tensor forward(const at::Tensor& x) { return fc(x.reshape({-1, 4})).view({x.size(0), -1, kClasses}).mean(1); }
  PerSample fc{nullptr};
};

// A wrapped layer's input modified in place after the layer ran.
struct InputChangedImpl : nn::Module {
  InputChangedImpl() { fc = register_module("fc", PerSample(nn::Linear(4, kClasses))); }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = torch::tanh(x);
    const at::Tensor y = fc(h);
    return y + h.mul_(2).narrow(1, 0, kClasses);
  }
  PerSample fc{nullptr};
};

TEST(PrivateStrategy, RefusesPerSampleLayersItCouldNotClipExactly) {
  torch::set_num_threads(1);
  const at::Tensor x = torch::randn({3, 4}), positions = torch::randn({3, 2, 4});
  const std::string nested = refusal_of(nn::ModuleHolder<NestedImpl>(), x);
  EXPECT_NE(nested.find("cohort::PerSample 'outer.module.0' is inside cohort::PerSample 'outer'"), std::string::npos)
      << nested;
  const std::string tied = refusal_of(nn::ModuleHolder<TiedByHandImpl>(), x);
  EXPECT_NE(tied.find("parameter 'weight' of watched layer 'fc' is also used outside that layer's forward"),
            std::string::npos)
      << tied;
  const std::string folded = refusal_of(nn::ModuleHolder<FoldedImpl>(), positions);
  EXPECT_NE(folded.find("watched layer 'fc' (torch::nn::LinearImpl) ran on an input of shape [6, 4]"),
            std::string::npos)
      << folded;
  EXPECT_NE(folded.find("samples along dim 0"), std::string::npos) << folded;
  const std::string changed = refusal_of(nn::ModuleHolder<InputChangedImpl>(), x);
  EXPECT_NE(changed.find("the input of watched layer 'fc' was modified in place after the layer ran"),
            std::string::npos)
      << changed;
}

// ---- tensor parallelism: ranks as threads, tp = world size ----

constexpr int64_t kTpClasses = 4;

// Column (split output) -> tanh on the slices -> row (parallel input) ->
// tanh -> column with two chunks, gathered: every parallel layer kind.
nn::Sequential make_tensor_parallel() {
  nn::Sequential net(nn::Flatten(),
                     ColumnParallelLinear(25, 8, {.gather_output = false, .seed = 1, .dtype = at::kDouble}),
                     nn::Tanh(), RowParallelLinear(8, 6, {.input_is_parallel = true, .seed = 2, .dtype = at::kDouble}),
                     nn::Tanh(), ColumnParallelLinear(6, kTpClasses, {.chunks = 2, .seed = 3, .dtype = at::kDouble}));
  return net;
}

// The same model on one process: Linear layers holding the full weights
// every rank slices from.
nn::Sequential make_full_reference() {
  nn::Sequential net(nn::Flatten(), nn::Linear(25, 8), nn::Tanh(), nn::Linear(8, 6), nn::Tanh(),
                     nn::Linear(6, kTpClasses));
  net->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  const std::vector<std::tuple<int, int64_t, int64_t, uint64_t>> layers = {{1, 25, 8, 1}, {3, 8, 6, 2},
                                                                           {5, 6, kTpClasses, 3}};
  for (const auto& [index, in, out, seed] : layers) {
    const FullLinearInit init = full_linear_init(in, out, /*bias=*/true, seed, at::kDouble);
    auto& linear = *net[index]->as<nn::Linear>();
    linear.weight.copy_(init.weight);
    linear.bias.copy_(init.bias);
  }
  return net;
}

TEST(PrivateStrategy, TensorParallelStepIsEachRanksSliceOfTheFullModelsLoop) {
  const auto [x, y] = make_data(9);
  for (int tp : {1, 2})
    for (const Clipping clipping : {Clipping::flat, Clipping::per_layer}) {
      nn::Sequential reference = make_full_reference();
      const TrainingModel model = training_model(reference, cross_entropy, sgd(1.0));
      const double c = 0.05;  // clips every sample
      const auto expected = reference_clipped_mean(*reference, model.forward, x, y, c, clipping);
      std::map<std::string, at::Tensor> full_step;  // by the tp model's parameter names
      const std::vector<std::string> names = {"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"};
      for (size_t k = 0; k < names.size(); ++k) full_step[names[k]] = expected[k];
      run_torch_ranks(tp, [&](int rank, int) {
        nn::Sequential net = make_tensor_parallel();
        const auto before = net->named_parameters().pairs();
        std::map<std::string, at::Tensor> start;
        for (const auto& [name, p] : before) start[name] = p.detach().clone();
        PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), clipping_only(c, clipping));
        dp.prepare(training_model(net, cross_entropy, sgd(1.0)));
        COHORT_CHECK(dp.gradient_path() == privacy::GradientPath::kernels) << "tp model off the kernel path";
        dp.train_step({x, y}, x.size(0));
        const auto specs = shard_specs(*net);
        const TensorParallelGroup group = TensorParallelGroup::of();
        for (const auto& [name, p] : net->named_parameters().pairs()) {
          const at::Tensor want = shard_of(full_step.at(name), specs.at(name), group, name);
          const at::Tensor step = start.at(name) - p.detach();
          COHORT_CHECK(torch::allclose(step, want, 1e-9, 1e-12))
              << "tp " << tp << " rank " << rank << " clipping " << int(clipping) << " " << name
              << ": max difference " << (step - want).abs().max().item<double>();
        }
      });
    }
}

// sigma C = 1 at tp = 2: a step's noise is what a noised run's gradient
// adds to a noiseless one's (times the batch). The replicated bias of the
// row-parallel layer must get the same noise on both ranks (the copies stay
// equal), the shards independent noise of the right scale.
TEST(PrivateStrategy, TensorParallelShardsGetIndependentNoiseAndCopiesTheSame) {
  const auto [x, y] = make_data(9);
  PerRank<std::map<std::string, at::Tensor>> noise(2);
  run_torch_ranks(2, [&](int rank, int) {
    std::map<std::string, at::Tensor> grads[2];
    for (int noised : {0, 1}) {
      nn::Sequential net = make_tensor_parallel();
      PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), {.noise_multiplier = double(noised),
                                                                 .max_grad_norm = 1,
                                                                 .sample_rate = 0.5,
                                                                 .poisson = false,
                                                                 .seed = 7});
      dp.prepare(training_model(net, cross_entropy, sgd(1.0)));
      dp.train_step({x, y}, x.size(0));
      for (const auto& [name, p] : net->named_parameters().pairs()) grads[noised][name] = p.grad().clone();
    }
    std::map<std::string, at::Tensor> drawn;
    for (const auto& [name, g] : grads[1]) drawn[name] = (g - grads[0].at(name)) * double(x.size(0));
    noise.add(rank, drawn);
  });
  const auto& a = noise.of(0)[0];
  const auto& b = noise.of(1)[0];
  EXPECT_TRUE(torch::equal(a.at("3.bias"), b.at("3.bias"))) << "the replicated bias got different noise";
  std::vector<at::Tensor> sa, sb;
  for (const auto& [name, t] : a) {
    if (name == "3.bias") continue;
    EXPECT_FALSE(torch::equal(t, b.at(name))) << name << ": the two shards got the same noise";
    sa.push_back(t.flatten());
    sb.push_back(b.at(name).flatten());
  }
  const at::Tensor u = torch::cat(sa), v = torch::cat(sb);
  const double n = double(u.numel());
  // Standard normal draws: the sample variance is within 6 sd (sqrt(2 / n)),
  // the correlation of the ranks' draws within 6 / sqrt(n).
  EXPECT_NEAR(torch::cat({u, v}).pow(2).mean().item<double>(), 1.0, 6 * std::sqrt(2.0 / (2 * n)));
  EXPECT_LT(std::fabs((u * v).mean().item<double>()), 6 / std::sqrt(n));
}

TEST(PrivateStrategy, ClippingBoundsTheStepOfEverySample) {
  // One sample, C = 1e-3: the step (lr 1) is that sample's gradient scaled
  // to norm C (up to Opacus's 1e-6), on both paths.
  torch::set_num_threads(1);
  const auto [x, y] = make_data(1);
  auto check = [&](auto net) {
    const auto before = initial_parameters(*net);
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(),
                       {.noise_multiplier = 0, .max_grad_norm = 1e-3, .sample_rate = 0.5, .poisson = false});
    dp.prepare(training_model(net, cross_entropy, sgd(1.0)));
    dp.train_step({x, y}, 1);
    double sq = 0;
    const auto after = net->parameters();
    for (size_t k = 0; k < after.size(); ++k) sq += (before[k] - after[k]).pow(2).sum().template item<double>();
    EXPECT_NEAR(std::sqrt(sq), 1e-3, 1e-8);
  };
  check(make_sequential());
  check(CustomNet());
}

// fit() with Poisson sampling at `ranks` ranks: the final parameters, each
// epoch's logged epsilon, and the steps taken.
struct PoissonRun {
  at::Tensor parameters;
  std::vector<double> epsilons;
  int64_t steps = 0;
};

PrivacyOptions poisson_options() {
  return {.noise_multiplier = 0.7,
          .max_grad_norm = 0.5,
          .sample_rate = 0.1,
          .seed = 5,
          .noise_share = privacy::NoiseShare::designated};
}

PoissonRun poisson_fit(int ranks, int64_t n, int epochs, const std::vector<at::Tensor>& init) {
  const auto [x, y] = make_data(n);
  const TensorDataset data(x, y);
  PerRank<PoissonRun> runs(ranks);
  run_torch_ranks(ranks, [&](int rank, int) {
    std::unique_ptr<Strategy> inner;
    if (ranks == 1) inner = std::make_unique<OneDeviceStrategy>();
    else inner = std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
    PrivateStrategy dp(std::move(inner), poisson_options());
    Model model(dp, with_parameters(make_sequential(), init), {.loss = cross_entropy, .optimizer = sgd(0.5)});
    const History history = model.fit(data, {.epochs = epochs, .catch_preemption = false});
    runs.add(rank, {.parameters = flat_parameters(dp.module()), .epsilons = history.values("epsilon"),
                    .steps = dp.steps()});
  });
  return runs.of(0).at(0);
}

TEST(PrivateStrategy, PoissonBatchesThroughFitGiveTheSameModelAtEveryRankCount) {
  // N = 20, q = 0.1: two rows a step on average, so ranks often have none
  // and some steps have no row anywhere; 10 steps an epoch.
  const auto init = initial_parameters(*make_sequential());
  const PoissonRun one = poisson_fit(1, 20, 2, init);
  EXPECT_EQ(one.steps, 20);
  for (const int ranks : {2, 3}) {
    const PoissonRun many = poisson_fit(ranks, 20, 2, init);
    EXPECT_EQ(many.steps, one.steps);
    EXPECT_TRUE(torch::allclose(many.parameters, one.parameters, 1e-9, 1e-12))
        << ranks << " ranks: max difference " << (many.parameters - one.parameters).abs().max().item<double>();
    EXPECT_EQ(many.epsilons, one.epsilons);
  }
  // The logged budget is the accountant's for the steps taken so far.
  ASSERT_EQ(one.epsilons.size(), 2u);
  for (int e = 0; e < 2; ++e)
    EXPECT_DOUBLE_EQ(one.epsilons[size_t(e)],
                     privacy::epsilon_spent({{.noise_multiplier = 0.7, .sample_rate = 0.1, .steps = 10 * (e + 1)}},
                                            1e-5, privacy::AccountantKind::rdp));
  EXPECT_LT(one.epsilons[0], one.epsilons[1]);
}

// The budget goes through BackupAndRestore itself: a backup written by one
// process after one epoch, resumed by two ranks for the second, must give the
// steps, the per-epoch epsilons and the parameters of a run never stopped.
TEST(PrivateStrategy, BudgetSurvivesBackupAndRestoreAtAnotherRankCount) {
  const auto init = initial_parameters(*make_sequential());
  const int64_t n = 20;
  const auto [x, y] = make_data(n);
  const TensorDataset data(x, y);
  const PoissonRun uninterrupted = poisson_fit(1, n, 2, init);

  // One epoch on one process, backed up at its end (and kept)...
  launcher::testing::TempDir dir;
  {
    torch::set_num_threads(1);
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), poisson_options());
    Model model(dp, with_parameters(make_sequential(), init), {.loss = cross_entropy, .optimizer = sgd(0.5)});
    model.fit(data, {.epochs = 1,
                     .catch_preemption = false,
                     .callbacks = {backup_and_restore(dir.path(), {.keep_after_success = true})}});
  }
  ASSERT_TRUE(std::filesystem::exists(backup_path(dir.path())));
  // ...resumed from the backup on two ranks for the second.
  PerRank<PoissonRun> runs(2);
  run_torch_ranks(2, [&](int rank, int) {
    PrivateStrategy dp(std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()}),
                       poisson_options());
    Model model(dp, make_sequential(), {.loss = cross_entropy, .optimizer = sgd(0.5)});
    const History history = model.fit(
        data, {.epochs = 2, .catch_preemption = false, .callbacks = {backup_and_restore(dir.path())}});
    runs.add(rank, {.parameters = flat_parameters(dp.module()), .epsilons = history.values("epsilon"),
                    .steps = dp.steps()});
  });
  ASSERT_EQ(uninterrupted.epsilons.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const PoissonRun& resumed = runs.of(r).at(0);
    EXPECT_EQ(resumed.steps, uninterrupted.steps);
    EXPECT_EQ(resumed.epsilons, uninterrupted.epsilons) << "rank " << r;
    EXPECT_TRUE(torch::allclose(resumed.parameters, uninterrupted.parameters, 1e-9, 1e-12))
        << "rank " << r << ": max difference "
        << (resumed.parameters - uninterrupted.parameters).abs().max().item<double>();
  }
}

TEST(PrivateStrategy, MakePrivateWithEpsilonMeetsItsTarget) {
  auto dp = privacy::make_private_with_epsilon(std::make_unique<OneDeviceStrategy>(),
                                               {.max_grad_norm = 1, .sample_rate = 0.02},
                                               {.target_epsilon = 2, .delta = 1e-5, .epochs = 3});
  const double sigma = dp->options().noise_multiplier;
  const double eps = privacy::epsilon_spent({{.noise_multiplier = sigma, .sample_rate = 0.02, .steps = 150}}, 1e-5,
                                            privacy::AccountantKind::rdp);
  EXPECT_LE(eps, 2.0);
  EXPECT_GT(eps, 2.0 - 0.01 - 1e-9);
  EXPECT_THROW(privacy::make_private_with_epsilon(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 0.02},
                                                  {.target_epsilon = 2, .epochs = 3, .steps = 10}),
               ConfigError);
}

template <typename Fn>
std::string config_error(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(PrivateStrategy, OwnStateRollsTheBudgetAndTheNoiseKeyBack) {
  // What an elastic fit commits beside the model: after 2 steps, then 3
  // more, putting the 2-step state back gives the 2-step budget and step
  // count (which keys the next step's noise). Bytes that are not such a
  // state, and any state given to a strategy that keeps none, are refused.
  torch::set_num_threads(1);
  PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(),
                     {.noise_multiplier = 1, .max_grad_norm = 1, .sample_rate = 0.25, .poisson = false});
  train_steps(dp, make_sequential(), sgd(0.1), 2, 4);
  const std::string two = dp.own_state();
  const double epsilon_two = dp.epsilon();
  const auto [x, y] = make_data(12);
  for (int s = 0; s < 3; ++s) dp.train_step({x.narrow(0, 4 * s, 4), y.narrow(0, 4 * s, 4)}, 4);
  EXPECT_EQ(dp.steps(), 5);
  dp.load_own_state(two);
  EXPECT_EQ(dp.steps(), 2);
  EXPECT_EQ(dp.epsilon(), epsilon_two);
  EXPECT_DOUBLE_EQ(epsilon_two, privacy::epsilon_spent({{.noise_multiplier = 1, .sample_rate = 0.25, .steps = 2}},
                                                       1e-5, privacy::AccountantKind::rdp));
  EXPECT_NE(config_error([&] { dp.load_own_state("not an archive"); }).find("private: bad own state (14 bytes)"),
            std::string::npos);
  // A strategy that keeps no state of its own refuses one (the default).
  struct Stateless : ElasticTraining {
    void rejoin() override {}
  } stateless;
  EXPECT_EQ(stateless.own_state(), "");
  EXPECT_NE(config_error([&] { stateless.load_own_state(two); }).find("keeps no state of its own"), std::string::npos);
  // Whether it follows an elastic job's membership is the wrapped strategy's say.
  EXPECT_EQ(dp.elastic(), nullptr);
}

TEST(PrivateStrategy, RefusesWhatItCannotTrainPrivately) {
  torch::set_num_threads(1);
  const std::string batch_norm = config_error([] {
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 0.1});
    nn::Sequential net(nn::Conv2d(1, 2, 3), nn::BatchNorm2d(2), nn::Flatten(), nn::Linear(18, 3));
    dp.prepare(training_model(net, cross_entropy, sgd(0.1)));
  });
  EXPECT_NE(batch_norm.find("module '1' (torch::nn::BatchNorm2d"), std::string::npos) << batch_norm;
  EXPECT_NE(batch_norm.find("GroupNorm"), std::string::npos) << batch_norm;

  const std::string mirrored = config_error([] {
    PrivateStrategy dp(std::make_unique<MirroredStrategy>(MirroredOptions{.replicas = 2}), {.sample_rate = 0.1});
  });
  EXPECT_NE(mirrored.find("one replica per process"), std::string::npos) << mirrored;

  EXPECT_NE(config_error([] {
              PrivateStrategy(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 1.5});
            }).find("sample rate must be in (0, 1]"),
            std::string::npos);
  // Sample rate 0 is the training plan's: a step before the plan is refused,
  // saying where the plan comes from.
  const std::string no_plan = config_error([] {
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 0});
    dp.prepare(training_model(make_sequential(), cross_entropy, sgd(0.1)));
    const auto [x, y] = make_data(4);
    dp.train_step({x, y}, 4);
  });
  EXPECT_NE(no_plan.find("begin_training"), std::string::npos) << no_plan;
  EXPECT_NE(config_error([] {
              PrivateStrategy(std::make_unique<OneDeviceStrategy>(),
                              {.noise_multiplier = 1, .max_grad_norm = kInf, .sample_rate = 0.1});
            }).find("finite max grad norm"),
            std::string::npos);

  const std::string no_record = config_error([] {
    OneDeviceStrategy plain;
    plain.prepare(training_model(make_sequential(), cross_entropy, sgd(0.1)));
    torch::serialize::OutputArchive out;
    plain.save(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    std::istringstream in(bytes.str());
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 0.1});
    dp.prepare(training_model(make_sequential(), cross_entropy, sgd(0.1)));
    dp.load(archive);
  });
  EXPECT_NE(no_record.find("no privacy record"), std::string::npos) << no_record;
}

struct WrappedTensorParallelImpl : nn::Module {
  WrappedTensorParallelImpl() : net(register_module("net", make_tensor_parallel())) {}
  at::Tensor forward(const at::Tensor& x) { return net->forward(x); }
  nn::Sequential net;
};
TORCH_MODULE(WrappedTensorParallel);

TEST(PrivateStrategy, RefusesTensorParallelLayersItWouldClipByShard) {
  const auto over_processes = run_torch_ranks_errors<ConfigError>(2, [](int) {
    PrivateStrategy dp(std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()}),
                       {.sample_rate = 0.1});
    dp.prepare(training_model(make_tensor_parallel(), cross_entropy, sgd(0.1)));
  });
  for (const std::string& e : over_processes)
    EXPECT_NE(e.find("shards"), std::string::npos) << "multi_worker over a tp model: " << e;
  const auto not_sequential = run_torch_ranks_errors<ConfigError>(2, [](int) {
    PrivateStrategy dp(std::make_unique<OneDeviceStrategy>(), {.sample_rate = 0.1});
    dp.prepare(training_model(WrappedTensorParallel(), cross_entropy, sgd(0.1)));
  });
  for (const std::string& e : not_sequential)
    EXPECT_NE(e.find("not a torch::nn::Sequential"), std::string::npos) << "a wrapped tp model: " << e;
}

}  // namespace
}  // namespace cohort::testing::privacy_strategy_test
