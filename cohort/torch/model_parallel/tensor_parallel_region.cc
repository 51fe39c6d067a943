#include "cohort/torch/model_parallel/tensor_parallel_region.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

TensorParallelGroup TensorParallelGroup::of(engine::Engine* engine) {
  engine::Engine& e = resolve_engine(engine);
  return TensorParallelGroup{&e, e.rank(), e.size()};
}

int64_t divide_evenly(int64_t total, int size, const char* what) {
  COHORT_CHECK_AS(ConfigError, size > 0 && total % size == 0)
      << what << " = " << total << " does not divide by the tensor-parallel size " << size;
  return total / size;
}

namespace {

// The group travels through autograd's saved_data, which holds IValues; the
// engine pointer is stored as an integer (the group outlives the graph, as
// the layers that made it do).
void save_group(AutogradContext* ctx, const TensorParallelGroup& g) {
  ctx->saved_data["engine"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(g.engine));
  ctx->saved_data["rank"] = static_cast<int64_t>(g.rank);
  ctx->saved_data["size"] = static_cast<int64_t>(g.size);
}

TensorParallelGroup load_group(AutogradContext* ctx) {
  TensorParallelGroup g;
  g.engine = reinterpret_cast<engine::Engine*>(static_cast<intptr_t>(ctx->saved_data["engine"].toInt()));
  g.rank = static_cast<int>(ctx->saved_data["rank"].toInt());
  g.size = static_cast<int>(ctx->saved_data["size"].toInt());
  return g;
}

void check_group(const TensorParallelGroup& g, const char* what) {
  COHORT_CHECK_AS(ConfigError, g.engine != nullptr) << what << ": the tensor-parallel group has no engine";
  COHORT_CHECK_AS(ConfigError, g.size == g.engine->size() && g.rank == g.engine->rank())
      << what << ": group says rank " << g.rank << " of " << g.size << " but its engine is rank " << g.engine->rank()
      << " of " << g.engine->size();
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorParallelGroup g) {
    save_group(ctx, g);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {tensor_parallel_sum(grads[0], load_group(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, TensorParallelGroup g) {
    return tensor_parallel_sum(x, g);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherFromRegion : torch::autograd::Function<GatherFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorParallelGroup g) {
    save_group(ctx, g);
    return tensor_parallel_gather_last_dim(x, g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {tensor_parallel_slice_last_dim(grads[0], load_group(ctx)), at::Tensor()};
  }
};

struct ScatterToRegion : torch::autograd::Function<ScatterToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorParallelGroup g) {
    save_group(ctx, g);
    return tensor_parallel_slice_last_dim(x, g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {tensor_parallel_gather_last_dim(grads[0], load_group(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor tensor_parallel_sum(const at::Tensor& input, const TensorParallelGroup& g) {
  check_group(g, "tensor-parallel allreduce");
  // A group of one has nothing to add: skip the engine round trip.
  if (g.size == 1) return input.clone();
  return allreduce(input, {.op = ReduceOp::sum, .engine = g.engine});
}

at::Tensor tensor_parallel_gather_last_dim(const at::Tensor& input, const TensorParallelGroup& g) {
  check_group(g, "tensor-parallel gather");
  COHORT_CHECK_AS(ConfigError, input.dim() >= 1)
      << "tensor-parallel gather: needs at least one dimension, got a scalar";
  if (g.size == 1) return input.clone();
  // cohort's allgather joins along dim 0: bring the last dim to the front,
  // gather, and move it back.
  torch::NoGradGuard no_grad;
  const at::Tensor front = input.movedim(-1, 0).contiguous();
  const at::Tensor all = allgather(front, {.engine = g.engine});
  COHORT_CHECK_AS(MismatchError, all.size(0) == front.size(0) * g.size)
      << "tensor-parallel gather: ranks passed different last dims (rank " << g.rank << " has " << front.size(0) << ", "
      << all.size(0) << " in all over " << g.size << " ranks)";
  return all.movedim(0, -1).contiguous();
}

at::Tensor tensor_parallel_slice_last_dim(const at::Tensor& input, const TensorParallelGroup& g) {
  COHORT_CHECK_AS(ConfigError, input.dim() >= 1)
      << "tensor-parallel scatter: needs at least one dimension, got a scalar";
  const int64_t part = divide_evenly(input.size(-1), g.size, "tensor-parallel scatter: last dim");
  return input.narrow(-1, g.rank * part, part).contiguous();
}

at::Tensor copy_to_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group) {
  check_group(group, "copy_to_tensor_parallel_region");
  return CopyToRegion::apply(input, group);
}
at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group) {
  check_group(group, "reduce_from_tensor_parallel_region");
  return ReduceFromRegion::apply(input, group);
}
at::Tensor gather_from_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group) {
  check_group(group, "gather_from_tensor_parallel_region");
  return GatherFromRegion::apply(input, group);
}
at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& input, const TensorParallelGroup& group) {
  check_group(group, "scatter_to_tensor_parallel_region");
  return ScatterToRegion::apply(input, group);
}

}  // namespace cohort
