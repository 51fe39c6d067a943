#include "cohort/torch/core/optimizer_archive.h"

#include <torch/torch.h>

#include <string>

#include "cohort/common/check.h"

namespace cohort {

void save_optimizer(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive) {
  torch::serialize::OutputArchive state;
  optimizer.save(state);
  archive.write("state", state);
  const auto& groups = optimizer.param_groups();
  archive.write("num_groups", c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::OutputArchive options;
    groups[i].options().serialize(options);
    archive.write("group_options/" + std::to_string(i), options);
  }
}

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  c10::IValue num_groups;
  archive.read("num_groups", num_groups);
  auto& groups = optimizer.param_groups();
  COHORT_CHECK_AS(MismatchError, num_groups.isInt() && num_groups.toInt() == static_cast<int64_t>(groups.size()))
      << "the saved optimizer has " << (num_groups.isInt() ? num_groups.toInt() : -1)
      << " param groups, this one has " << groups.size();
  torch::serialize::InputArchive state;
  archive.read("state", state);
  // State the archive lacks (a parameter never stepped there) must not
  // survive here either.
  optimizer.state().clear();
  optimizer.load(state);
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive options;
    archive.read("group_options/" + std::to_string(i), options);
    groups[i].options().serialize(options);
  }
}

}  // namespace cohort
