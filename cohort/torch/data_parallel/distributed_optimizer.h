// DistributedOptimizer: data-parallel training with any torch::optim
// optimizer, Horovod style. Five lines of change:
//
//   cohort::init();
//   torch::optim::SGD sgd(model->parameters(), lr * cohort::size());
//   cohort::DistributedOptimizer opt(sgd, model->named_parameters());
//   cohort::broadcast_parameters(*model, 0);
//   cohort::broadcast_optimizer_state(sgd, 0);
//   ... loss.backward(); opt.step(); opt.zero_grad();
//
// How: a hook on every trained parameter fires the moment autograd has
// accumulated its gradient for this backward pass into .grad() and submits
// the parameter's allreduce (named "<name_prefix>/<parameter name>") to the
// engine, which reduces .grad() in place while the rest of backward runs.
// step() waits for them and steps the wrapped optimizer.
//
// Contracts:
// - Every parameter of the optimizer's param groups must be among
//   `named_parameters` (ConfigError otherwise): an unnamed parameter would
//   silently train apart on every rank. Names must be unique and equal on
//   every rank; only parameters that the optimizer holds and that require
//   grad are reduced.
// - With backward_passes_per_step = k, the gradient is accumulated in .grad()
//   locally over k backward passes and reduced once, in the k-th; more than k
//   passes before step() is an error. With average_backward_passes (the
//   default) the accumulated sum is divided by k, so k passes over batches of
//   B equal one pass over k*B with a mean loss.
// - A parameter that got no gradient on this rank by step() (unused in this
//   rank's forward, or fewer passes) is submitted then, with its current
//   .grad() or zeros: no rank waits forever, and every rank applies the same
//   reduced gradient. A parameter that no rank used thus gets a zero gradient
//   (as in Horovod), which optimizers with weight decay or momentum apply.
// - op avg: .grad() = sum over ranks of (grad / predivide) * predivide / size,
//   i.e. gradient_predivide_factor only splits the averaging into a division
//   before and after the sum (for reduced-precision range). op sum requires
//   gradient_predivide_factor = 1. Other reduce ops are a ConfigError.
// - Compression (compression.h) applies on the wire only; .grad() keeps the
//   parameter's dtype.
// - Between backward() and synchronize() (or step()) the engine is writing
//   the reduced gradients into .grad(): read or modify .grad() (clipping,
//   NaN checks) only after synchronize(), then call step(), which does not
//   reduce again (Horovod's synchronize-then-clip pattern).
// - Gradients are reduced identically on every rank, so ranks that start
//   identical (broadcast_parameters, broadcast_optimizer_state) stay bitwise
//   identical.
// - The wrapped optimizer and the engine must outlive this object. Hooks are
//   removed on destruction, which first waits for allreduces in flight.
// - Not thread-safe: step(), synchronize() and zero_grad() are called from
//   the training thread (hooks fire on autograd's thread and are synchronised
//   internally).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>

#include "cohort/common/reduce_op.h"
#include "cohort/engine/engine.h"
#include "cohort/torch/data_parallel/compression.h"

namespace cohort {

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::avg;  // avg or sum over ranks
  Compression compression = Compression::none;
  int backward_passes_per_step = 1;
  bool average_backward_passes = true;  // divide the k-pass sum by k
  double gradient_predivide_factor = 1.0;
  std::string name_prefix = "grad";  // distinct per optimizer sharing an engine
  engine::Engine* engine = nullptr;  // null: see runtime.h
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(torch::optim::Optimizer& optimizer,
                       const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // synchronize() unless it already ran since the last backward pass, then
  // the wrapped optimizer's step().
  void step();
  // Waits for every parameter's allreduce (submitting those not yet
  // submitted) and puts the reduced gradients in .grad(). Call it before
  // step() to edit the reduced gradients (e.g. clipping).
  void synchronize();
  // Drops every parameter's gradient (.grad() becomes undefined), as
  // LibTorch 2.x's zero_grad() does by default, on 1.13 too: the next
  // backward pass then starts from nothing instead of adding to zeros.
  void zero_grad();

  torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }
  // Parameters whose gradients this optimizer reduces.
  size_t num_reduced_parameters() const;

  struct Impl;

 private:
  torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort
