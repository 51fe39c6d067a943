// OptimizerFactory: how a strategy makes the program's optimizer over the
// parameters it chooses (all of them, a shard of them, none on a process
// that does not train). A program gives it as the optimizer's options alone,
// the optimizer deduced from their type:
//
//   .optimizer = torch::optim::SGDOptions(0.1).momentum(0.9)      // SGD
//   .optimizer = torch::optim::AdamWOptions(1e-3)                  // AdamW
//
// or as any callable that makes one:
//
//   .optimizer = [](const std::vector<at::Tensor>& p) { return std::make_unique<MyOptimizer>(p, ...); }
//
// The options of LibTorch's optimizers (SGD, Adam, AdamW, Adagrad, RMSprop,
// LBFGS) deduce theirs; an optimizer of the program's own joins them with a
// specialisation: template <> struct cohort::optimizer_for<MyOptions> { using type = MyOptimizer; };
#pragma once

#include <ATen/Tensor.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace cohort {

// The optimizer an options type configures.
template <typename Options>
struct optimizer_for {};
template <>
struct optimizer_for<torch::optim::SGDOptions> {
  using type = torch::optim::SGD;
};
template <>
struct optimizer_for<torch::optim::AdamOptions> {
  using type = torch::optim::Adam;
};
template <>
struct optimizer_for<torch::optim::AdamWOptions> {
  using type = torch::optim::AdamW;
};
template <>
struct optimizer_for<torch::optim::AdagradOptions> {
  using type = torch::optim::Adagrad;
};
template <>
struct optimizer_for<torch::optim::RMSpropOptions> {
  using type = torch::optim::RMSprop;
};
template <>
struct optimizer_for<torch::optim::LBFGSOptions> {
  using type = torch::optim::LBFGS;
};

class OptimizerFactory {
 public:
  using Make = std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& parameters)>;

  OptimizerFactory() = default;
  // Any callable that makes an optimizer over the parameters it is given.
  template <
      typename F,
      std::enable_if_t<
          std::is_invocable_r_v<std::unique_ptr<torch::optim::Optimizer>, F&, const std::vector<at::Tensor>&>, int> = 0>
  OptimizerFactory(F make) : make_(std::move(make)) {}
  // The options of an optimizer that optimizer_for<> knows.
  template <typename Options, typename Optimizer = typename optimizer_for<std::decay_t<Options>>::type>
  OptimizerFactory(Options options)
      : make_([options = std::move(options)](
                  const std::vector<at::Tensor>& parameters) -> std::unique_ptr<torch::optim::Optimizer> {
          return std::make_unique<Optimizer>(parameters, options);
        }) {}

  std::unique_ptr<torch::optim::Optimizer> operator()(const std::vector<at::Tensor>& parameters) const {
    return make_(parameters);
  }
  explicit operator bool() const { return static_cast<bool>(make_); }

 private:
  Make make_;
};

// A factory for `Optimizer` with `options`, when the optimizer is not the
// one optimizer_for<> deduces (or to name it explicitly):
//   optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
template <typename Optimizer, typename Options>
OptimizerFactory optimizer_factory(Options options) {
  return OptimizerFactory([options = std::move(options)](
                              const std::vector<at::Tensor>& parameters) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<Optimizer>(parameters, options);
  });
}

}  // namespace cohort
