// ModuleWrapper<Derived>: the base of cohort's wrapper modules (ShardedUnit,
// PerSample), which mark one module of a model of the program's own for a
// strategy (LibTorch C++ modules have no forward hooks). It holds the
// wrapped module as its child "module", runs it through its own typed
// forward, one tensor in and one out, and is a torch::nn::Cloneable: clone()
// gives a deep copy whose forward runs its own copy of the wrapped module,
// so a Cloneable model holding wrappers can be replicated (mirrored).
//
//   class MarkImpl : public cohort::ModuleWrapper<MarkImpl> {
//    public:
//     template <cohort::ModuleHolderType Holder>
//     explicit MarkImpl(const Holder& module) : ModuleWrapper(module) {}
//     at::Tensor forward(const at::Tensor& x) { return run(x); }
//   };
//
// Contracts: the holder is not empty (ConfigError); the wrapped module's
// forward takes and returns one tensor; clone() needs the wrapped module to
// be a torch::nn::Cloneable (LibTorch's layers and torch::nn::Sequential
// are; LibTorch's c10::Error otherwise, naming it).
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/cloneable.h>

#include <concepts>
#include <functional>
#include <memory>

#include "cohort/common/check.h"

namespace cohort {

// A module holder: a TORCH_MODULE type or torch::nn::Sequential.
template <typename T>
concept ModuleHolderType = requires(const T& holder) {
  typename T::ContainedType;
  {holder.ptr()};
  { holder.is_empty() } -> std::convertible_to<bool>;
};

template <typename Derived>
class ModuleWrapper : public torch::nn::Cloneable<Derived> {
 public:
  // Cloneable's protocol (clone() calls it on the copy, whose module is
  // still the original's): the copy gets a deep copy of its own. A wrapper
  // with state of its own overrides this and calls it first.
  void reset() override {
    module_ = module_->clone();
    run_ = bind_(*module_);
    this->register_module("module", module_);
  }

  torch::nn::Module& module() const { return *module_; }
  // The wrapped module's forward alone.
  at::Tensor run(const at::Tensor& input) const { return run_(input); }

 protected:
  template <ModuleHolderType Holder>
  explicit ModuleWrapper(const Holder& holder)
      : module_(checked(holder)), bind_(&bind<typename Holder::ContainedType>), run_(bind_(*module_)) {
    this->register_module("module", module_);
  }

 private:
  using Run = std::function<at::Tensor(const at::Tensor&)>;

  template <ModuleHolderType Holder>
  static std::shared_ptr<torch::nn::Module> checked(const Holder& holder) {
    COHORT_CHECK_AS(ConfigError, !holder.is_empty()) << "a cohort wrapper was given an empty module holder";
    return holder.ptr();
  }

  // The typed forward of `module`, which is an Impl (dynamic_cast: Module is
  // a virtual base of LibTorch's layers).
  template <typename Impl>
  static Run bind(torch::nn::Module& module) {
    auto* impl = &dynamic_cast<Impl&>(module);
    return [impl](const at::Tensor& input) -> at::Tensor { return impl->forward(input); };
  }

  std::shared_ptr<torch::nn::Module> module_;
  Run (*bind_)(torch::nn::Module&);
  Run run_;
};

}  // namespace cohort
