// A unit of ZeRO stage 3 (FSDP's wrapped module) inside a model of the
// program's own. LibTorch C++ modules have no forward hooks, so a model that
// is not a torch::nn::Sequential says where its units are by wrapping them:
//
//   struct NetImpl : torch::nn::Module {
//     NetImpl() {
//       embed = register_module("embed", torch::nn::Linear(64, 512));
//       for (int i = 0; i < 8; ++i)
//         blocks.push_back(register_module("block" + std::to_string(i), cohort::ShardedUnit(Block(512))));
//       head = register_module("head", torch::nn::Linear(512, 10));
//     }
//     at::Tensor forward(at::Tensor x) {
//       x = embed(x);
//       for (auto& block : blocks) x = block(x);
//       return head(x);
//     }
//     ...
//   };
//
// Under the zero strategy at stage 3 (strategy/zero.h binds the units when
// it prepares the model), calling a unit while a step trains gathers its
// parameters (the next unit's gather starts meanwhile), runs the wrapped
// module, frees them and has backward gather them again just before it
// needs them; the last unit stays gathered for backward. The parameters
// outside every unit (embed and head above) are the root unit, gathered for
// the whole step. Anywhere else (another strategy, evaluation, no binding) a
// unit only runs its module.
//
// Contracts: the wrapped module's forward takes and returns one tensor;
// while a step trains, each unit is called once, in the order the units
// were registered (the order of their gathers, which every rank follows,
// including a rank without rows, which only walks the units): a unit
// called out of turn, twice or not at all is a ConfigError naming it;
// units do not nest.
//
// A unit is a torch::nn::Cloneable: clone() (of the unit, or of a Cloneable
// model holding it, as the mirrored strategy makes its replicas) gives a
// deep copy whose forward runs the copy of the wrapped module, unbound from
// any zero strategy. The wrapped module must then be Cloneable too.
#pragma once

#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>

#include "cohort/torch/core/module_wrapper.h"

namespace cohort {

class ZeroOptimizer;

class ShardedUnitImpl : public ModuleWrapper<ShardedUnitImpl> {
 public:
  // Any module holder (a TORCH_MODULE type, torch::nn::Sequential) whose
  // forward takes and returns one tensor, registered as the child "module".
  template <ModuleHolderType Holder>
  explicit ShardedUnitImpl(const Holder& module) : ModuleWrapper(module) {}

  // clone()'s copy: its own deep copy of the module, and no zero binding.
  void reset() override;

  at::Tensor forward(const at::Tensor& input);

  // What a bound unit follows: the sharded optimizer, and whether a step is
  // training (units act only then). Shared by the units of one model.
  struct Schedule {
    ZeroOptimizer* zero = nullptr;
    bool training = false;
    int next = 0;  // the unit whose turn it is
  };
  // The zero strategy's binding: this is unit `unit` of `schedule`'s
  // optimizer.
  void bind(std::shared_ptr<Schedule> schedule, int unit);

 private:
  std::shared_ptr<Schedule> schedule_;
  int unit_ = -1;
};
TORCH_MODULE(ShardedUnit);

// Runs `run` on `input` as unit `unit` of `zero` (stage 3): gathers it
// (the next unit's gather started meanwhile), runs, frees it and hooks the
// output so that backward gathers it again first; the last unit stays
// gathered. What a bound ShardedUnit does, and the zero strategy for a
// Sequential's units. Without `input` (a rank without rows), the same
// collectives without running anything.
at::Tensor run_sharded_unit(ZeroOptimizer& zero, int unit, const at::Tensor* input,
                            const std::function<at::Tensor(const at::Tensor&)>& run);

}  // namespace cohort
