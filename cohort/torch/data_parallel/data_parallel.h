// DataParallel: one process, several replicas of a model, PyTorch's
// nn.DataParallel in C++ without its per-step cost of re-cloning the model.
//
//   torch::nn::Sequential net(...);
//   cohort::DataParallel dp(net, {.replicas = 4});
//   torch::optim::SGD sgd(dp.module()->parameters(), lr);  // the main replica
//   for (...) {
//     sgd.zero_grad();
//     at::Tensor loss = dp.train_step(x, y, [](const at::Tensor& out, const at::Tensor& t) {
//       return torch::nn::functional::cross_entropy(out, t);  // a mean over the rows
//     });
//     sgd.step();
//   }
//   at::Tensor logits = dp.forward(x_test);  // no grad, gathered along dim 0
//
// How: the given module is replica 0 (the "main" one, whose parameters an
// optimizer steps); replicas 1.. are made once with clone(). A pool of
// persistent threads (replica_pool.h), one per replica and all created in
// the constructor, runs every step in three phases, each in parallel:
//   1. sync: each replica i > 0 copies the main replica's parameters and
//      buffers, takes its train/eval mode and drops its own gradients;
//   2. compute: replica i runs loss_fn(forward(x_i), y_i) on its shard of the
//      batch and backward with the seed rows_i / rows (train_step), or only
//      forward under NoGradGuard (forward);
//   3. reduce: the replicas' gradients are summed into the main replica's
//      .grad(), each worker summing a slice of the parameters (balanced by
//      element count).
// Phase 1 copies every step rather than tracking tensor version counters:
// cohort itself writes parameters through raw memory (broadcast_parameters,
// checkpoint loads), which no version counter sees, and the copy is one
// memcpy of the model per replica, done by the replicas in parallel; it is
// small next to a forward and backward.
//
// Contract:
// - Numbers: the main replica's .grad() receives the gradient of the
//   whole-batch mean loss, sum_i (rows_i / rows) * loss_i, which equals one
//   device running loss_fn on the whole batch when loss_fn is a mean over the
//   rows it is given (the usual reduction; a sum-reducing loss_fn would be
//   scaled by rows_i / rows). Gradients accumulate into .grad() as one
//   backward would (zero them as usual). Equality with one device is up to
//   floating-point summation order (bitwise with one replica).
// - Layers that mix rows (BatchNorm in training) see only their shard, as in
//   PyTorch's DataParallel: each replica normalises with its shard's
//   statistics, and the running statistics kept are those of replica 0,
//   updated from shard 0 only (the other replicas' buffer updates are
//   overwritten by the next sync). In eval mode BatchNorm uses the running
//   statistics and DataParallel equals one device. (SyncBatchNorm is for
//   ranks of an engine, not for these replica threads.)
// - Scatter: rows of dim 0 are split as reduce_scatter_block (collectives.h)
//   splits them: the first rows % n replicas get one row more. A batch with
//   fewer rows than replicas runs on `rows` replicas (one row each); the
//   others idle that step. A batch of 0 rows is a ConfigError. The target
//   (when defined) must have the input's dim 0 and is split the same way.
// - The module must be CPU-resident and a torch::nn::Cloneable (its clone()
//   implemented), else ConfigError; its structure (the set of parameters and
//   buffers) must not change after construction. Parameters may be
//   replaced in place (copy_, set_, loads) at any time between steps.
// - Threads: replica i always runs on worker thread i (the caller only
//   waits), so thread-local settings are per replica. threads_per_replica
//   is applied with at::set_num_threads() on each worker once, which under
//   LibTorch's OpenMP backend (Debian's and the official Linux builds) sets
//   that thread's own intra-op team size; it also updates LibTorch's global
//   default that threads created later start from. Under the native backend
//   the intra-op pool is process-wide and cannot be resized once used, so
//   the setting is left alone there. Worker threads start with grad mode on
//   and LibTorch's default thread-local state: the caller's NoGradGuard,
//   autocast or InferenceMode do not carry over.
// - loss_fn runs on the workers, concurrently: it must be thread-safe (a
//   pure function of its arguments is). It must return a one-element tensor
//   that requires grad (ConfigError otherwise).
// - Devices: empty devices means `replicas` CPU replicas. A non-empty list
//   makes one replica per entry and overrides `replicas`; CPU entries are
//   accepted, CUDA (or any other) devices are a ConfigError in this version
//   (written and tested on CPU-only LibTorch; no device placement, streams
//   or device-side reduction exist yet).
// - Errors: an exception thrown on a worker (by loss_fn, the module or a
//   check) reaches the caller after every replica has finished the phase;
//   the lowest replica's wins. The main replica's .grad() is then
//   unspecified (zero it before the next step); the pool stays usable.
// - Not thread-safe: one caller at a time. The module holder given is
//   shared, not copied: module() is that same module.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/torch/core/strategy.h"  // LossFn
#include "cohort/torch/data_parallel/replica_pool.h"

namespace cohort {

struct DataParallelOptions {
  int replicas = 2;                  // CPU replicas (thread groups); ignored when devices is non-empty
  int threads_per_replica = 1;       // intra-op threads of each replica's worker (see the file comment)
  std::vector<c10::Device> devices;  // empty: `replicas` CPU replicas; CUDA: ConfigError for now
};

namespace detail {

// The validated replica count of `options` (ConfigError on bad options).
int data_parallel_replicas(const DataParallelOptions& options);

// module.clone() for a replica of `who` (DataParallel, mirrored,
// central_storage), with LibTorch's clone() errors (a module that is not a
// torch::nn::Cloneable, a reset() that does not build every member) turned
// into a ConfigError that says what to change in the program's model.
std::shared_ptr<torch::nn::Module> clone_replica(const torch::nn::Module& module, const std::string& who);

// Everything of DataParallel that does not depend on the module type.
class DataParallelCore {
 public:
  using ForwardFn = std::function<at::Tensor(int replica, const at::Tensor& input)>;

  // modules[0] is the main replica; the others are its clones.
  DataParallelCore(std::vector<std::shared_ptr<torch::nn::Module>> modules, const DataParallelOptions& options);

  // `output`, when given, receives the replicas' outputs concatenated along
  // dim 0 (detached).
  at::Tensor train_step(const at::Tensor& input, const at::Tensor& target, const ForwardFn& forward,
                        const LossFn& loss_fn, at::Tensor* output = nullptr);
  at::Tensor forward(const at::Tensor& input, const ForwardFn& forward);

  int replicas() const { return int(replicas_.size()); }
  const ReplicaPool& pool() const { return *pool_; }

 private:
  struct Replica {
    std::shared_ptr<torch::nn::Module> module;
    std::vector<at::Tensor> parameters;  // in module->parameters() order
    std::vector<at::Tensor> buffers;     // in module->buffers() order
  };
  struct Shard {
    int64_t offset = 0;
    int64_t rows = 0;
  };

  std::vector<Shard> scatter(const at::Tensor& input, const at::Tensor& target, const char* what) const;
  void sync(int replica, bool drop_gradients);
  void reduce_gradients(int worker, int workers);

  std::vector<Replica> replicas_;
  // Per reduce worker, the parameter indices it sums (rebuilt when the number
  // of active replicas changes).
  std::vector<std::vector<size_t>> reduce_slices_;
  std::unique_ptr<ReplicaPool> pool_;
};

}  // namespace detail

template <typename ModuleHolderT>
class DataParallel {
 public:
  using ModuleType = typename ModuleHolderT::ContainedType;

  explicit DataParallel(ModuleHolderT module, DataParallelOptions options = {}) : module_(std::move(module)) {
    COHORT_CHECK_AS(ConfigError, !module_.is_empty()) << "DataParallel: the module holder is empty";
    const int n = detail::data_parallel_replicas(options);
    replicas_.push_back(module_);
    std::vector<std::shared_ptr<torch::nn::Module>> modules{module_.ptr()};
    for (int i = 1; i < n; ++i) {
      auto copy = std::dynamic_pointer_cast<ModuleType>(detail::clone_replica(*module_, "DataParallel"));
      COHORT_CHECK_AS(ConfigError, copy != nullptr)
          << "DataParallel: clone() of module " << module_->name() << " did not return a "
          << "module of its own type";
      modules.push_back(copy);
      replicas_.emplace_back(std::move(copy));
    }
    core_ = std::make_unique<detail::DataParallelCore>(std::move(modules), options);
  }

  // Scatters input and target along dim 0, runs loss_fn(replica(x_i), y_i)
  // and its backward on every replica in parallel, sums the gradients into
  // module()'s .grad(); returns the whole-batch loss (0-dim, detached).
  at::Tensor train_step(const at::Tensor& input, const at::Tensor& target, const LossFn& loss_fn) {
    return core_->train_step(input, target, forward_fn(), loss_fn);
  }

  // Inference: every replica's forward on its shard under NoGradGuard, the
  // outputs concatenated along dim 0.
  at::Tensor forward(const at::Tensor& input) { return core_->forward(input, forward_fn()); }

  // The main replica (replica 0): the module given to the constructor.
  ModuleHolderT& module() { return module_; }
  const ModuleHolderT& module() const { return module_; }

  int replicas() const { return core_->replicas(); }
  // Replica i (0 is module()); the same objects for the life of this one.
  const ModuleHolderT& replica(int i) const { return replicas_.at(size_t(i)); }
  // Tasks the persistent workers have run: per active replica, sync and
  // compute, plus reduce in a train_step with more than one active replica.
  int64_t worker_tasks() const { return core_->pool().tasks_run(); }

 private:
  detail::DataParallelCore::ForwardFn forward_fn() {
    return [this](int i, const at::Tensor& x) -> at::Tensor { return replicas_[size_t(i)]->forward(x); };
  }

  ModuleHolderT module_;
  std::vector<ModuleHolderT> replicas_;
  std::unique_ptr<detail::DataParallelCore> core_;
};

}  // namespace cohort
