#include "cohort/torch/model_parallel/tensor_parallel_module.h"

#include <torch/torch.h>

#include <functional>
#include <set>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"

namespace cohort {
namespace {

// A parameter with the module that registered it.
struct OwnedParameter {
  std::string name;  // recursive, as module.named_parameters() spells it
  at::Tensor parameter;
  const TensorParallelModule* owner = nullptr;  // null: a replicated module
  ShardSpec spec;
};

// Walks the tree by reference (named_modules() needs the root in a
// shared_ptr, which a caller's module need not be).
void collect(torch::nn::Module& module, const std::string& prefix, std::vector<OwnedParameter>& out) {
  const auto* tp = dynamic_cast<const TensorParallelModule*>(&module);
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    OwnedParameter p;
    p.name = prefix.empty() ? item.key() : prefix + "." + item.key();
    p.parameter = item.value();
    p.owner = tp;
    if (tp != nullptr) p.spec = tp->shard_spec(item.key());
    out.push_back(std::move(p));
  }
  for (const auto& child : module.named_children())
    collect(*child.value(), prefix.empty() ? child.key() : prefix + "." + child.key(), out);
}

std::vector<OwnedParameter> parameters_of(torch::nn::Module& module) {
  std::vector<OwnedParameter> out;
  collect(module, "", out);
  return out;
}

}  // namespace

at::Tensor shard_of(const at::Tensor& full, const ShardSpec& spec, const TensorParallelGroup& group,
                    const std::string& what) {
  if (spec.dim < 0) return full;
  COHORT_CHECK_AS(ConfigError, spec.dim < full.dim())
      << what << ": split along dim " << spec.dim << " but the tensor has shape " << full.sizes();
  const int64_t chunk = divide_evenly(full.size(spec.dim), static_cast<int>(spec.chunks), what.c_str());
  const int64_t part = divide_evenly(chunk, group.size, what.c_str());
  std::vector<at::Tensor> pieces;
  for (int64_t c = 0; c < spec.chunks; ++c)
    pieces.push_back(full.narrow(spec.dim, c * chunk + group.rank * part, part));
  return at::cat(pieces, spec.dim).contiguous();
}

at::Tensor unshard(const at::Tensor& local, const ShardSpec& spec, const TensorParallelGroup& group) {
  if (spec.dim < 0 || group.size == 1) return local.detach().clone();
  torch::NoGradGuard no_grad;
  // allgather joins along dim 0: gather with the split dim in front.
  const at::Tensor front = local.detach().movedim(spec.dim, 0).contiguous();
  const at::Tensor all = allgather(front, {.engine = group.engine});  // (size * local rows, ...)
  // Rank-major [rank][chunk][part] -> chunk-major [chunk][rank][part].
  const int64_t part = front.size(0) / spec.chunks;
  std::vector<int64_t> shape = {group.size, spec.chunks, part};
  for (int64_t d = 1; d < front.dim(); ++d) shape.push_back(front.size(d));
  at::Tensor joined = all.reshape(shape).transpose(0, 1).reshape(all.sizes());
  return joined.movedim(0, spec.dim).contiguous();
}

bool splits_over_ranks(const torch::nn::Module& module) {
  const auto* split = dynamic_cast<const TensorParallelModule*>(&module);
  return split != nullptr && split->group().size > 1;
}

std::map<std::string, ShardSpec> shard_specs(torch::nn::Module& module) {
  std::map<std::string, ShardSpec> out;
  for (const auto& p : parameters_of(module)) out[p.name] = p.spec;
  return out;
}

void load_full_parameters(torch::nn::Module& module, const std::map<std::string, at::Tensor>& full) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : parameters_of(module)) {
    auto it = full.find(p.name);
    COHORT_CHECK_AS(ConfigError, it != full.end())
        << "load_full_parameters: no tensor for parameter '" << p.name << "'";
    const at::Tensor& f = it->second;
    at::Tensor slice = p.owner ? shard_of(f, p.spec, p.owner->group(), "parameter '" + p.name + "'") : f;
    COHORT_CHECK_AS(ConfigError, slice.sizes() == p.parameter.sizes())
        << "load_full_parameters: parameter '" << p.name << "' has local shape " << p.parameter.sizes()
        << " but the full tensor of shape " << f.sizes() << " gives " << slice.sizes() << " on this rank";
    p.parameter.copy_(slice);
    used.insert(p.name);
  }
  for (const auto& [name, tensor] : full)
    COHORT_CHECK_AS(ConfigError, used.count(name) == 1)
        << "load_full_parameters: '" << name << "' is not a parameter of the module";
}

std::map<std::string, at::Tensor> gather_full_parameters(torch::nn::Module& module, bool gradients) {
  std::map<std::string, at::Tensor> out;
  for (auto& p : parameters_of(module)) {
    at::Tensor value = p.parameter.detach();
    if (gradients) value = p.parameter.grad().defined() ? p.parameter.grad().detach() : at::zeros_like(value);
    out[p.name] = p.owner ? unshard(value, p.spec, p.owner->group()) : value.clone();
  }
  return out;
}

}  // namespace cohort
