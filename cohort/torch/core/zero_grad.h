// PyTorch 2's optimizer.zero_grad(set_to_none=True), for LibTorch 1.13 too,
// whose Optimizer::zero_grad() zeroes in place: that costs a pass to zero
// every gradient and makes the next backward accumulate into it (another
// pass) instead of handing over the tensor it computed. Dropped gradients also
// let optimizers skip parameters that get none.
#pragma once

#include <torch/optim/optimizer.h>

namespace cohort {

// Makes every .grad() of the optimizer's parameters undefined.
inline void zero_grad_to_none(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    for (at::Tensor p : group.params())
      if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

}  // namespace cohort
