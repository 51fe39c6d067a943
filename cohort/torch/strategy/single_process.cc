#include "cohort/torch/strategy/single_process.h"

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/optimizer_archive.h"

namespace cohort::detail {

void check_single_process(const std::string& name) {
  const rendezvous::LaunchInfo job = rendezvous::discover();
  COHORT_CHECK_AS(ConfigError, job.size == 1)
      << "strategy '" << name << "' trains in one process, but this is rank " << job.rank << " of " << job.size
      << " (" << rendezvous::launch_source_name(job.source)
      << "): use --strategy multi_worker across processes, or start one process";
}

void save_replicated(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                     torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive model, optim;
  module.save(model);
  save_optimizer(optimizer, optim);
  archive.write("model", model);
  archive.write("optimizer", optim);
}

void load_replicated(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                     torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive model, optim;
  archive.read("model", model);
  archive.read("optimizer", optim);
  check_module_state(module, model);
  load_optimizer(optimizer, optim);
  load_module_state(module, model);  // in place: the data-parallel hooks stay attached
}

at::Tensor zero_loss(torch::nn::Module& module) {
  at::Tensor loss;
  for (const at::Tensor& p : module.parameters()) {
    if (!p.requires_grad()) continue;
    const at::Tensor term = (p * 0).sum().to(at::kDouble);
    loss = loss.defined() ? loss + term : term;
  }
  COHORT_CHECK_AS(ConfigError, loss.defined()) << "the model has no trainable parameters";
  return loss;
}

}  // namespace cohort::detail
