// dp_sgd: what a DP-SGD step costs against the non-private step of the same
// model and batch, and against micro-batches of one (TF-Privacy's way, and
// cohort's fallback for models it has no kernels for), on one process.
// bench/dp_sgd.sh runs it and prints the table.
//
// Three strategies train the same model (fresh copies of one initial state):
//   plain         one_device: forward, backward, SGD;
//   dp_kernels    private over one_device: per-sample norms and clipped sums
//                 from the layer kernels (ghost norms), noise, SGD;
//   dp_micro      private over one_device, the model wrapped so that it is
//                 not a Sequential: one backward pass per sample.
// The models: the example's Sequentials (mlp, cnn, tanh_cnn), and
// residual_cnn, a model of one's own (tests/torch/residual_models.h: conv
// stem, two residual blocks of conv and GroupNorm, Linear head) whose layers
// are in cohort::PerSample for plain and dp_kernels, and unwrapped for
// dp_micro (what such a model took before PerSample).
// Each round runs `steps` steps of each, the order rotating every round;
// a step's time is the round's wall time over its steps. Prints the median
// over rounds of each and the ratios.
//
//   build/bench/dp_sgd --model cnn --batch 256 --rounds 5
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "cohort/common/flags.h"
#include "cohort/common/stats.h"
#include "cohort/models/image_classifiers.h"
#include "tests/torch/residual_models.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model = "cnn";
  int rounds = 5;
  int steps = 4;             // per strategy per round
  int micro_steps = 1;       // dp_micro is slow: its steps per round
  int64_t batch = 256;
};

using cohort::median;

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); }

// The same network behind a module that is not a Sequential: the private
// strategy has to take the micro-batch path.
struct OpaqueImpl : torch::nn::Module {
  explicit OpaqueImpl(torch::nn::Sequential inner) : net(register_module("net", std::move(inner))) {}
  at::Tensor forward(const at::Tensor& x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Opaque);

// `model`'s network with its loss and optimizer; `micro`: as dp_micro
// trains it.
cohort::TrainingModel model_of(const std::string& model, bool micro, const cohort::OptimizerFactory& sgd) {
  torch::manual_seed(1);
  if (model == "residual_cnn") {
    namespace ct = cohort::testing;
    return cohort::training_model(ct::ResidualCnn(ct::ResidualCnnOptions{.channels = 16,
                                                                         .groups = 4,
                                                                         .stem_stride = 2,
                                                                         .classes = 10,
                                                                         .wrapping = {.per_sample = !micro},
                                                                         .dtype = torch::kFloat32}),
                                  loss_of, sgd);
  }
  if (micro) return cohort::training_model(Opaque(cohort::models::fashion_mnist_classifier(model)), loss_of, sgd);
  return cohort::training_model(cohort::models::fashion_mnist_classifier(model), loss_of, sgd);
}

int run(const Flags& f) {
  cohort::set_intra_op_threads(1);
  namespace dp = cohort::privacy;
  const at::Tensor x = torch::randn({f.batch, 1, 28, 28}), y = torch::randint(0, 10, {f.batch}, torch::kLong);
  const auto sgd = cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.01));
  const dp::PrivacyOptions options{.noise_multiplier = 1.0, .max_grad_norm = 1.0, .sample_rate = 0.01,
                                   .poisson = false};

  cohort::OneDeviceStrategy plain;
  plain.prepare(model_of(f.model, false, sgd));
  dp::PrivateStrategy kernels(std::make_unique<cohort::OneDeviceStrategy>(), options);
  kernels.prepare(model_of(f.model, false, sgd));
  dp::PrivateStrategy micro(std::make_unique<cohort::OneDeviceStrategy>(), options);
  micro.prepare(model_of(f.model, true, sgd));
  if (kernels.gradient_path() != dp::GradientPath::kernels || micro.gradient_path() != dp::GradientPath::micro_batches) {
    std::fprintf(stderr, "dp_sgd: the strategies did not take the paths under test\n");
    return 1;
  }

  struct Contender {
    const char* name;
    cohort::Strategy* strategy;
    int steps;
    std::vector<double> ms;
  };
  std::vector<Contender> contenders = {{"plain", &plain, f.steps, {}},
                                       {"dp_kernels", &kernels, f.steps, {}},
                                       {"dp_micro", &micro, f.micro_steps, {}}};
  const cohort::Batch batch{x, y};
  for (auto& c : contenders) c.strategy->train_step(batch, f.batch);  // warm-up
  for (int r = 0; r < f.rounds; ++r)
    for (size_t k = 0; k < contenders.size(); ++k) {
      Contender& c = contenders[(k + size_t(r)) % contenders.size()];
      const auto t0 = Clock::now();
      for (int s = 0; s < c.steps; ++s) c.strategy->train_step(batch, f.batch);
      c.ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / c.steps);
    }
  const double p = median(contenders[0].ms), k = median(contenders[1].ms), m = median(contenders[2].ms);
  std::printf("dp_sgd: model %s, batch %lld, %d rounds, 1 intra-op thread; dp_kernels: %s\n", f.model.c_str(),
              (long long)f.batch, f.rounds, kernels.gradient_path_description().c_str());
  std::printf("{\"bench\":\"dp_sgd\",\"model\":\"%s\",\"batch\":%lld,\"plain_ms\":%.3f,\"dp_kernels_ms\":%.3f,"
              "\"dp_micro_ms\":%.3f,\"kernels_over_plain\":%.3f,\"micro_over_kernels\":%.2f,"
              "\"micro_over_plain\":%.2f}\n",
              f.model.c_str(), (long long)f.batch, p, k, m, k / p, m / k, m / p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  namespace flags = cohort::flags;
  try {
    flags::parse_flags(std::vector<std::string>(argv + 1, argv + argc),
                       {{"--model",
                         [&](auto& n, auto& v) {
                           f.model = flags::one_of(n, v, {"mlp", "cnn", "tanh_cnn", "residual_cnn"});
                         }},
                        {"--rounds", [&](auto& n, auto& v) { f.rounds = flags::parse_number<int>(n, v, 1); }},
                        {"--steps", [&](auto& n, auto& v) { f.steps = flags::parse_number<int>(n, v, 1); }},
                        {"--micro-steps", [&](auto& n, auto& v) { f.micro_steps = flags::parse_number<int>(n, v, 1); }},
                        {"--batch", [&](auto& n, auto& v) { f.batch = flags::parse_number<int64_t>(n, v, 1); }}},
                       {});
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_sgd: %s\n", flags::one_line_message(e).c_str());
    return 2;
  }
}
