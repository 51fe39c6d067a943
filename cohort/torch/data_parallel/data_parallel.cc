#include "cohort/torch/data_parallel/data_parallel.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "cohort/torch/core/collectives.h"

namespace cohort::detail {

int data_parallel_replicas(const DataParallelOptions& options) {
  COHORT_CHECK_AS(ConfigError, options.threads_per_replica >= 1)
      << "DataParallel: threads_per_replica must be >= 1, got " << options.threads_per_replica;
  if (options.devices.empty()) {
    COHORT_CHECK_AS(ConfigError, options.replicas >= 1)
        << "DataParallel: replicas must be >= 1, got " << options.replicas;
    return options.replicas;
  }
  for (size_t i = 0; i < options.devices.size(); ++i)
    COHORT_CHECK_AS(ConfigError, options.devices[i].is_cpu())
        << "DataParallel: devices[" << i << "] is " << options.devices[i].str()
        << "; only CPU replicas are implemented in this version (no CUDA placement yet)";
  return int(options.devices.size());
}

std::shared_ptr<torch::nn::Module> clone_replica(const torch::nn::Module& module, const std::string& who) {
  std::shared_ptr<torch::nn::Module> copy;
  try {
    copy = module.clone();
  } catch (const c10::Error& e) {
    // Module::clone() throws unless the module (and every submodule)
    // derives from Cloneable, naming the one that does not; Cloneable's
    // clone() throws when reset() does not build what the constructor built.
    const std::string said = e.what_without_backtrace();
    std::string type = module.name();
    const std::string marker = "implemented for ";
    if (const size_t at = said.find(marker); at != std::string::npos)
      if (const size_t end = said.find(". Subclass", at); end != std::string::npos)
        type = said.substr(at + marker.size(), end - at - marker.size());
    if (const size_t colon = type.rfind("::"); colon != std::string::npos) type = type.substr(colon + 2);
    COHORT_THROW(ConfigError) << who << ": the replicas are copies of the model made with clone(), and "
                              << module.name() << " cannot be cloned (" << said << "). Derive " << type
                              << " from torch::nn::Cloneable<" << type
                              << "> instead of torch::nn::Module, and build every parameter, buffer and submodule "
                                 "in its reset() (called by its constructor; clone() calls it on the copy), for it "
                                 "and for its own submodule types. Only mirrored, central_storage and DataParallel "
                                 "copy the model; one_device, multi_worker, zero and private train it as it is";
  }
  COHORT_CHECK_AS(ConfigError, copy != nullptr) << who << ": clone() of " << module.name() << " returned null";
  return copy;
}

DataParallelCore::DataParallelCore(std::vector<std::shared_ptr<torch::nn::Module>> modules,
                                   const DataParallelOptions& options) {
  for (auto& m : modules) {
    Replica r;
    r.parameters = m->parameters();
    r.buffers = m->buffers();
    r.module = std::move(m);
    replicas_.push_back(std::move(r));
  }
  const Replica& main = replicas_.front();
  for (size_t k = 0; k < main.parameters.size(); ++k)
    COHORT_CHECK_AS(ConfigError, !main.parameters[k].defined() || main.parameters[k].device().is_cpu())
        << "DataParallel: parameter " << k << " of " << main.module->name() << " is on "
        << main.parameters[k].device().str() << "; replicas are CPU-only in this version";
  for (size_t i = 1; i < replicas_.size(); ++i) {
    // clone() reproduces the structure; anything else would pair the wrong
    // tensors in sync and reduce.
    COHORT_CHECK_EQ_AS(ConfigError, replicas_[i].parameters.size(), main.parameters.size())
        << "DataParallel: replica " << i << " of " << main.module->name() << " has another parameter count";
    COHORT_CHECK_EQ_AS(ConfigError, replicas_[i].buffers.size(), main.buffers.size())
        << "DataParallel: replica " << i << " of " << main.module->name() << " has another buffer count";
  }
  const int threads = options.threads_per_replica;
  pool_ = std::make_unique<ReplicaPool>(int(replicas_.size()), [threads] {
#if AT_PARALLEL_OPENMP
    // Per-thread under OpenMP: each replica's worker gets its own team size.
    at::set_num_threads(threads);
#else
    (void)threads;  // the native pool is process-wide: see data_parallel.h
#endif
  });
}

std::vector<DataParallelCore::Shard> DataParallelCore::scatter(const at::Tensor& input, const at::Tensor& target,
                                                               const char* what) const {
  COHORT_CHECK_AS(ConfigError, input.defined()) << "DataParallel::" << what << ": input is undefined";
  COHORT_CHECK_AS(ConfigError, input.dim() >= 1) << "DataParallel::" << what << ": input is 0-dim; "
                                                 << "the batch is split along dim 0";
  COHORT_CHECK_AS(ConfigError, input.device().is_cpu())
      << "DataParallel::" << what << ": input is on " << input.device().str() << "; CPU only";
  const int64_t rows = input.size(0);
  COHORT_CHECK_AS(ConfigError, rows > 0) << "DataParallel::" << what << ": input has 0 rows";
  if (target.defined()) {
    COHORT_CHECK_AS(ConfigError, target.dim() >= 1 && target.size(0) == rows)
        << "DataParallel::" << what << ": target has " << (target.dim() >= 1 ? target.size(0) : 0)
        << " rows (dim 0) but input has " << rows;
  }
  const int active = int(std::min<int64_t>(int64_t(replicas_.size()), rows));
  std::vector<Shard> shards;
  for (int i = 0; i < active; ++i) {
    const RowBlock b = reduce_scatter_block(rows, active, i);
    shards.push_back({b.offset, b.rows});
  }
  return shards;
}

void DataParallelCore::sync(int replica, bool drop_gradients) {
  if (replica == 0) return;
  const Replica& main = replicas_.front();
  Replica& r = replicas_[size_t(replica)];
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < r.parameters.size(); ++k) {
    if (main.parameters[k].defined()) r.parameters[k].copy_(main.parameters[k]);
    // Undefined, not zeroed: this replica's backward then owns a fresh
    // gradient, and one it did not produce (unused parameter) stays absent.
    if (drop_gradients) r.parameters[k].mutable_grad().reset();
  }
  for (size_t k = 0; k < r.buffers.size(); ++k)
    if (main.buffers[k].defined() && r.buffers[k].defined()) r.buffers[k].copy_(main.buffers[k]);
  r.module->train(main.module->is_training());
}

void DataParallelCore::reduce_gradients(int worker, int workers) {
  const Replica& main = replicas_.front();
  for (size_t k : reduce_slices_[size_t(worker)]) {
    at::Tensor sum;
    for (int i = 1; i < workers; ++i) {
      const at::Tensor& g = replicas_[size_t(i)].parameters[k].grad();
      if (!g.defined()) continue;
      // Replica gradients are dropped at the next sync, so the first one
      // can serve as the accumulator (and be handed to main) without a copy.
      if (sum.defined())
        sum.add_(g);
      else
        sum = g;
    }
    if (!sum.defined()) continue;
    at::Tensor& grad = main.parameters[k].mutable_grad();
    if (grad.defined())
      grad.add_(sum);
    else
      grad = sum;
  }
}

at::Tensor DataParallelCore::train_step(const at::Tensor& input, const at::Tensor& target, const ForwardFn& forward,
                                        const LossFn& loss_fn, at::Tensor* output) {
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(loss_fn)) << "DataParallel::train_step: loss_fn is empty";
  const std::vector<Shard> shards = scatter(input, target, "train_step");
  const int active = int(shards.size());
  const int64_t rows = input.size(0);

  pool_->run(active, [&](int i) { sync(i, /*drop_gradients=*/true); });

  std::vector<at::Tensor> losses(static_cast<size_t>(active)), outputs(output ? size_t(active) : 0);
  pool_->run(active, [&](int i) {
    const Shard& s = shards[size_t(i)];
    const at::Tensor x = input.narrow(0, s.offset, s.rows);
    const at::Tensor y = target.defined() ? target.narrow(0, s.offset, s.rows) : target;
    const at::Tensor out = forward(i, x);
    if (output) outputs[size_t(i)] = out.detach();
    at::Tensor loss = loss_fn(out, y);
    COHORT_CHECK_AS(ConfigError, loss.defined() && loss.numel() == 1)
        << "DataParallel::train_step: loss_fn must return a one-element tensor, replica " << i << " got "
        << (loss.defined() ? loss.sizes() : at::IntArrayRef{});
    COHORT_CHECK_AS(ConfigError, loss.requires_grad())
        << "DataParallel::train_step: the loss of replica " << i << " does not require grad "
        << "(no trainable parameter reached it?)";
    // Seeding backward with rows_i / rows makes the replicas' gradients add
    // up to the gradient of the whole-batch mean loss.
    loss.backward(at::full_like(loss, double(s.rows) / double(rows)));
    losses[size_t(i)] = loss.detach();
  });

  if (active > 1) {
    if (int(reduce_slices_.size()) != active) {
      // Contiguous slices of about equal element counts, one per worker.
      const Replica& main = replicas_.front();
      int64_t total = 0;
      for (const auto& p : main.parameters) total += p.defined() ? p.numel() : 0;
      reduce_slices_.assign(size_t(active), {});
      int64_t seen = 0;
      for (size_t k = 0; k < main.parameters.size(); ++k) {
        const int64_t n = main.parameters[k].defined() ? main.parameters[k].numel() : 0;
        const int w = total > 0 ? int(std::min<int64_t>(active - 1, (seen + n / 2) * active / total)) : 0;
        reduce_slices_[size_t(w)].push_back(k);
        seen += n;
      }
    }
    pool_->run(active, [&](int w) { reduce_gradients(w, active); });
  }

  if (output) *output = active == 1 ? outputs[0] : at::cat(outputs);
  at::Tensor total = losses[0] * (double(shards[0].rows) / double(rows));
  for (int i = 1; i < active; ++i) total = total + losses[size_t(i)] * (double(shards[size_t(i)].rows) / double(rows));
  // One replica: the loss itself, bit for bit (the factor is exactly 1).
  return total.reshape({});
}

at::Tensor DataParallelCore::forward(const at::Tensor& input, const ForwardFn& forward) {
  const std::vector<Shard> shards = scatter(input, at::Tensor(), "forward");
  const int active = int(shards.size());
  pool_->run(active, [&](int i) { sync(i, /*drop_gradients=*/false); });
  std::vector<at::Tensor> outputs(static_cast<size_t>(active));
  pool_->run(active, [&](int i) {
    torch::NoGradGuard no_grad;
    const Shard& s = shards[size_t(i)];
    at::Tensor out = forward(i, input.narrow(0, s.offset, s.rows));
    COHORT_CHECK_AS(ConfigError, out.defined() && out.dim() >= 1)
        << "DataParallel::forward: replica " << i << " returned a 0-dim or undefined output; "
        << "outputs are gathered along dim 0";
    outputs[size_t(i)] = std::move(out);
  });
  return active == 1 ? outputs[0] : at::cat(outputs, 0);
}

}  // namespace cohort::detail
