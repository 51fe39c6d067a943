// Reducer: the gradient buckets of DistributedDataParallel (PyTorch's
// reducer.cpp, Flashlight's Reducer): averages the gradients of a list of
// parameters over ranks while backward is still running.
//
// - Parameters are packed into flat buckets of one dtype, the first capped at
//   first_bucket_bytes, the others at bucket_bytes, in reverse registration
//   order (backward usually produces the last layers' gradients first).
// - A hook after each parameter's gradient accumulation marks it ready; when
//   a bucket's last gradient is ready its communication is launched through
//   the comm hook (comm_hooks.h; plain allreduce by default) with ordered
//   engine submissions. Buckets launch in index order on every rank, so the
//   ordered submissions line up across ranks whatever order gradients
//   arrive in locally.
// - At the end of backward (an autograd callback) every bucket is waited for
//   and the averaged gradients are in .grad(). With gradient_as_bucket_view,
//   .grad() IS a view into the bucket (no copy out, no second buffer).
// - The first synchronised iteration records the order gradients arrived in;
//   at the next prepare_for_forward() the buckets are rebuilt once in rank 0's
//   arrival order (broadcast, so all ranks agree).
// - autotune_bucket_bytes (the caller agreed on it across ranks): while the
//   engine's autotuner searches (engine.h, tune_step), each training
//   forward's prepare_for_forward() after a synchronised backward ends a
//   step on rank 0 and broadcasts the bucket cap for the next one; the
//   buckets are built again in the agreed order with that cap (a cap other
//   than the configured one bounds the first bucket too). Once the search
//   has converged the cap stays and the broadcasts stop; a Reducer
//   destroyed mid-search stops it at the configured settings.
// - set_require_sync(false) (no_sync): gradients only accumulate locally in
//   .grad(); the next synchronised backward reduces the accumulated sum.
// - find_unused_parameters: prepare_for_backward(outputs) walks the autograd
//   graph from the outputs; parameters not in it are marked ready at once
//   (their current .grad(), or zeros). A parameter that no rank used keeps
//   its .grad() as it was (an undefined one stays undefined, so optimizers
//   skip it, as in PyTorch): one more small allreduce, of the used-parameter
//   map, at the end of backward. Without it, a parameter that got no
//   gradient leaves its bucket unlaunched and the next prepare_for_forward()
//   throws a ConfigError naming the parameter(s) and the rank.
// - Not thread-safe across calls except that hooks (autograd's thread) are
//   synchronised internally. An engine passed in the options must outlive the
//   Reducer; init()'s raises a ConfigError when used after shutdown().
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/torch/data_parallel/comm_hooks.h"

namespace cohort {

struct ReducerOptions {
  int64_t first_bucket_bytes = int64_t(1) << 20;  // 1 MiB: starts communication early
  int64_t bucket_bytes = int64_t(25) << 20;       // 25 MiB, as PyTorch
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  std::shared_ptr<CommHook> comm_hook;  // null: allreduce_hook()
  engine::Engine* engine = nullptr;     // null: see runtime.h
  bool autotune_bucket_bytes = false;   // the same on every rank (file comment)
};

class Reducer {
 public:
  // `params` must require grad, be dense contiguous CPU tensors, distinct,
  // and the same (order, shape, dtype) on every rank.
  Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each forward: throws if the previous synchronised backward left
  // parameters without gradient; rebuilds the buckets once (collective).
  void prepare_for_forward();
  // After forward, when find_unused_parameters: marks the parameters the
  // outputs do not depend on. No-op otherwise.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);

  void set_require_sync(bool require_sync);
  bool require_sync() const;

  // Parameter indices per bucket (for tests and logs).
  std::vector<std::vector<size_t>> bucket_indices() const;
  bool buckets_rebuilt() const;
  // Synchronised backward passes completed.
  int64_t iterations() const;
  // The bucket cap in use (options' bucket_bytes, or the autotuner's).
  int64_t bucket_bytes() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Parameter indices per bucket: `order` lists the parameters in the order to
// fill buckets; a bucket is closed once it reaches its cap (first cap, then
// cap). A parameter of at least `cap` bytes gets a bucket of its own (the
// Reducer reduces such a bucket in the parameter's .grad(), without a copy).
// Parameters of different dtypes never share a bucket.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params,
                                                const std::vector<size_t>& order, int64_t first_cap, int64_t cap);

}  // namespace cohort
