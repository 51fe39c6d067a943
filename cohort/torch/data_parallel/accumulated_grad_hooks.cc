#include "cohort/torch/data_parallel/accumulated_grad_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "cohort/common/check.h"

namespace cohort {
namespace {

struct AfterAccumulation final : torch::autograd::FunctionPostHook {
  AfterAccumulation(std::shared_ptr<const AccumulatedGradHooks::Callback> callback, size_t index)
      : callback(std::move(callback)), index(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& /*inputs*/) override {
    (*callback)(index);
    return outputs;
  }
  std::shared_ptr<const AccumulatedGradHooks::Callback> callback;
  size_t index;
};

}  // namespace

AccumulatedGradHooks::AccumulatedGradHooks(const std::vector<at::Tensor>& params, Callback on_accumulated) {
  auto callback = std::make_shared<const Callback>(std::move(on_accumulated));
  for (size_t i = 0; i < params.size(); ++i) {
    COHORT_CHECK_AS(ConfigError, params[i].requires_grad() && params[i].is_leaf())
        << "AccumulatedGradHooks: parameter " << i << " (shape " << params[i].sizes()
        << ") is not a leaf that requires grad";
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    keys_.push_back(acc->add_post_hook(std::make_unique<AfterAccumulation>(callback, i)));
    accumulators_.push_back(std::move(acc));
  }
}

AccumulatedGradHooks::~AccumulatedGradHooks() { remove(); }

void AccumulatedGradHooks::remove() {
  for (size_t i = 0; i < keys_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
  keys_.clear();
}

}  // namespace cohort
