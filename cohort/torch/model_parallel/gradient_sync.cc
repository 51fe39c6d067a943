#include "cohort/torch/model_parallel/gradient_sync.h"

#include <ATen/ATen.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"

namespace cohort {

void synchronize_gradients(const std::vector<at::Tensor>& params, engine::Engine& engine) {
  if (params.empty()) return;
  const auto dtype = params.front().scalar_type();
  std::vector<at::Tensor> flat;
  flat.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    COHORT_CHECK_AS(ConfigError, p.defined() && p.scalar_type() == dtype)
        << "synchronize_gradients: parameter " << i << " is "
        << (p.defined() ? c10::toString(p.scalar_type()) : "undefined") << ", parameter 0 is "
        << c10::toString(dtype) << " (one dtype per call)";
    const at::Tensor& g = p.grad();
    flat.push_back(g.defined() ? g.detach().reshape({-1}) : at::zeros({p.numel()}, p.options()));
  }
  // One buffer, one allreduce: the engine would fuse small ones anyway, but
  // one op keeps the per-step cost at one negotiation.
  at::Tensor buffer = at::cat(flat);
  if (engine.size() > 1) allreduce_(buffer, {.op = ReduceOp::avg, .engine = &engine});
  int64_t offset = 0;
  for (const at::Tensor& p : params) {
    at::Tensor part = buffer.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    if (p.grad().defined())
      p.mutable_grad().detach().copy_(part);
    else
      p.mutable_grad() = part.clone();
  }
}

}  // namespace cohort
