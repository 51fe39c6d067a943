// Calls a function after autograd has accumulated a parameter's gradient into
// its .grad(), once per backward pass that reaches the parameter.
//
// A tensor hook (Tensor::register_hook) runs before the accumulation and sees
// only this pass's gradient; this one runs after it, so the callback may read
// or reduce .grad() in place. It is a post hook of the parameter's
// AccumulateGrad node, the mechanism LibTorch 1.13 and 2.x share (2.1's
// register_post_accumulate_grad_hook is not in 1.13).
//
// The callback runs on the thread that runs the backward pass. The hooks are
// removed by remove() or the destructor; neither may race with a backward pass
// that reaches these parameters.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace cohort {

class AccumulatedGradHooks {
 public:
  using Callback = std::function<void(size_t param_index)>;

  // Every parameter must be a leaf that requires grad.
  AccumulatedGradHooks(const std::vector<at::Tensor>& params, Callback on_accumulated);
  ~AccumulatedGradHooks();
  AccumulatedGradHooks(const AccumulatedGradHooks&) = delete;
  AccumulatedGradHooks& operator=(const AccumulatedGradHooks&) = delete;

  // The AccumulateGrad node of parameter i: a graph traversal that reaches it
  // reaches the parameter.
  const torch::autograd::Node* accumulator(size_t i) const { return accumulators_.at(i).get(); }

  void remove();  // idempotent

 private:
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> keys_;
};

}  // namespace cohort
