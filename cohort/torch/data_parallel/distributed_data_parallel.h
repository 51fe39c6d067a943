// DistributedDataParallel: PyTorch-style data parallelism for a LibTorch
// module. Wrap the model, call the wrapper like the model, train as usual:
//
//   cohort::init();
//   auto net = torch::nn::Sequential(...);
//   cohort::DistributedDataParallel ddp(net);   // broadcasts rank 0's state
//   torch::optim::SGD sgd(net->parameters(), 0.1);
//   for (...) {
//     sgd.zero_grad();
//     auto loss = torch::nll_loss(ddp(x), y);
//     loss.backward();   // gradients averaged over ranks, overlapped with backward
//     sgd.step();
//   }
//   { auto guard = ddp.no_sync(); ddp(x1).sum().backward(); }  // accumulate locally
//
// Contracts:
// - Construction is collective over the engine's ranks: the parameter and
//   buffer tables (names, shapes, dtypes) are allgathered and compared, and a
//   rank whose model differs gets a MismatchError naming the first tensor
//   that differs and the ranks; then rank 0's parameters and buffers are
//   broadcast into every rank's tensors.
// - Gradients are averaged by a Reducer (reducer.h): buckets, overlap with
//   backward, one rebuild in arrival order, no_sync, find_unused_parameters,
//   gradient_as_bucket_view, comm hooks (comm_hooks.h, powersgd_hook.h).
// - Every forward (in grad mode or not) first checks that the previous
//   synchronised backward reduced every parameter (ConfigError naming the
//   parameters otherwise) and, with broadcast_buffers and more than one
//   rank, broadcasts rank 0's buffers (BatchNorm statistics) in place.
// - Every rank must run the same number of forward/backward passes with the
//   same no_sync pattern (the reductions are ordered engine submissions). A
//   pass whose partner rank has shut down is a MismatchError naming both
//   ranks and the step (a rank that runs out of data calls cohort::join()).
// - Replicas stay bitwise identical; a training forward (grad mode) checks
//   it at the first step and every agreement_check_steps (MismatchError on
//   every rank naming the parameter and ranks that differ).
// - The module must outlive the wrapper, and so must an engine passed in the
//   options. With init()'s engine, a forward or backward pass after
//   cohort::shutdown() raises a ConfigError (runtime.h: EngineRef).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data_parallel/comm_hooks.h"
#include "cohort/torch/data_parallel/reducer.h"

namespace cohort {

struct DistributedDataParallelOptions {
  int64_t first_bucket_bytes = int64_t(1) << 20;
  int64_t bucket_bytes = int64_t(25) << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool broadcast_buffers = true;
  // The constructor broadcasts rank 0's parameters (PyTorch's init_sync);
  // false: the caller makes them equal itself (an elastic job's state sync
  // follows a rejoin). The models' descriptions are compared either way.
  bool init_sync = true;
  // Parameter fingerprints compared across ranks before the first training
  // forward and every this many (replica_agreement.h); -1:
  // COHORT_AGREEMENT_CHECK_STEPS, 0: off.
  int64_t agreement_check_steps = -1;
  // When the engine autotunes (COHORT_AUTOTUNE, rank 0's), the bucket cap
  // joins its search during the first steps (reducer.h), unless the comm
  // hook keeps per-bucket state (PowerSGD); false: it stays bucket_bytes.
  // Rank 0's choice holds for every rank.
  bool autotune_bucket_bytes = true;
  std::shared_ptr<CommHook> comm_hook;  // null: allreduce_hook()
  engine::Engine* engine = nullptr;     // null: see runtime.h
};

// The module-independent part (also usable with a plain Module&).
class DistributedDataParallelBase {
 public:
  DistributedDataParallelBase(torch::nn::Module& module, DistributedDataParallelOptions options);
  virtual ~DistributedDataParallelBase();

  // RAII: gradients of backward passes run while it lives only accumulate
  // locally; the first backward after it is gone reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& reducer);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  // Call around a custom forward (operator() does both).
  void pre_forward();
  void post_forward(const std::vector<at::Tensor>& outputs);

  Reducer& reducer() { return *reducer_; }
  const DistributedDataParallelOptions& options() const { return options_; }
  // Until shutdown() for init()'s engine (ConfigError after).
  engine::Engine& engine() { return *engine_.lock(); }

 private:
  void check_same_model();
  void broadcast_buffers();
  void check_agreement_now(int64_t step);

  torch::nn::Module& module_;
  DistributedDataParallelOptions options_;
  EngineRef engine_;
  int64_t check_interval_;
  int64_t training_steps_ = 0;  // forwards in grad mode that began
  std::unique_ptr<Reducer> reducer_;
};

template <typename ModuleHolderT>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  explicit DistributedDataParallel(ModuleHolderT module, DistributedDataParallelOptions options = {})
      : DistributedDataParallelBase(*module.ptr(), std::move(options)), module_(std::move(module)) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    if constexpr (std::is_convertible_v<decltype(out), at::Tensor>)
      post_forward({at::Tensor(out)});
    else if constexpr (std::is_convertible_v<decltype(out), std::vector<at::Tensor>>)
      post_forward(out);
    else
      post_forward({});  // find_unused_parameters needs tensor outputs: ConfigError
    return out;
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  ModuleHolderT& module() { return module_; }
  auto* operator->() { return module_.get(); }

 private:
  ModuleHolderT module_;
};

}  // namespace cohort
