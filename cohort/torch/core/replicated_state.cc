#include "cohort/torch/core/replicated_state.h"

#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/optimizer_archive.h"

namespace cohort {

void save_replicated_state(torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                           torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive model, optim;
  module.save(model);
  save_optimizer(optimizer, optim);
  archive.write("model", model);
  archive.write("optimizer", optim);
}

void load_replicated_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                           torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive model, optim;
  archive.read("model", model);
  archive.read("optimizer", optim);
  check_module_state(module, model);
  load_optimizer(optimizer, optim);
  load_module_state(module, model);
}

}  // namespace cohort
