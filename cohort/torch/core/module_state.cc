#include "cohort/torch/core/module_state.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort {
namespace {

// Calls visit(key, saved, have) for every parameter and buffer of `module`
// and its serializable children, with the archive's tensor for it;
// ConfigError when the archive lacks one or has it in another shape or dtype.
template <typename Visit>
void walk(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix,
          const std::string& what, const Visit& visit) {
  auto one = [&](const std::string& key, at::Tensor& have, bool is_buffer) {
    at::Tensor saved;
    COHORT_CHECK_AS(ConfigError, archive.try_read(key, saved, is_buffer))
        << what << " does not fit the model: it has no " << (is_buffer ? "buffer" : "parameter") << " '"
        << prefix << key << "'";
    COHORT_CHECK_AS(ConfigError, saved.sizes() == have.sizes() && saved.scalar_type() == have.scalar_type())
        << what << " does not fit the model: '" << prefix << key << "' is " << saved.sizes() << " "
        << saved.scalar_type() << " there, " << have.sizes() << " " << have.scalar_type() << " here";
    visit(have, saved);
  };
  for (auto& p : module.named_parameters(/*recurse=*/false)) one(p.key(), p.value(), false);
  for (auto& b : module.named_buffers(/*recurse=*/false)) one(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::InputArchive nested;
    COHORT_CHECK_AS(ConfigError, archive.try_read(child.key(), nested))
        << what << " does not fit the model: it has no module '" << prefix << child.key() << "'";
    walk(*child.value(), nested, prefix + child.key() + ".", what, visit);
  }
}

}  // namespace

void check_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                        const std::string& what) {
  walk(module, archive, "", what, [](at::Tensor&, const at::Tensor&) {});
}

void load_module_state(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& what) {
  check_module_state(module, archive, what);
  torch::NoGradGuard no_grad;
  walk(module, archive, "", what, [](at::Tensor& have, const at::Tensor& saved) { have.copy_(saved); });
}

std::vector<at::Tensor> trainable(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : parameters)
    if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace cohort
