// SyncBatchNorm: batch normalisation over the global batch of all ranks of an
// engine, for data-parallel training whose per-rank batches are too small for
// good statistics (PyTorch's nn.SyncBatchNorm, for cohort's engine).
//
//   torch::nn::Sequential net(torch::nn::Conv2d(3, 8, 3),
//                             cohort::SyncBatchNorm(8), torch::nn::ReLU());
//   // or: net = cohort::convert_sync_batch_norm(net);
//
// Training mode (world size > 1), per forward: every rank computes its
// per-channel sum, sum of squares and value count, one fused allreduce (2C + 1
// float64 values) gives the global ones, and the input is normalised with
// the global mean and (biased) variance. The backward is a custom autograd
// function: one fused allreduce of the per-channel sum(dy) and
// sum(dy * x_hat) gives grad_input exactly as BatchNorm over the
// concatenated batch would. grad weight / grad bias are this rank's
// contributions (their sum over ranks is the global BatchNorm's; the data
// parallel gradient reduction adds them up).
//
// Contract:
// - Inputs (N, C, *): 2-d to 5-d, C = num_features (ConfigError otherwise),
//   floating dtype. Ranks may hold different N, including 0 rows; every rank
//   must still call forward (and backward) of every SyncBatchNorm in the same
//   order, as for any unnamed cohort collective (collectives.h). Fewer than
//   2 values per channel over all ranks is a ConfigError on every rank.
// - Running statistics: with track_running_stats, every rank updates
//   running_mean / running_var with the global mean and the unbiased global
//   variance and momentum (or the cumulative average when momentum is
//   nullopt, counted by num_batches_tracked), exactly BatchNorm's rule on the
//   global batch, so ranks stay identical.
// - Eval mode uses the running statistics and does not communicate. Without
//   running statistics eval normalises with this rank's own batch, like
//   PyTorch's SyncBatchNorm.
// - World size 1: no communication; the forward is at::batch_norm, i.e.
//   BatchNorm bit for bit.
// - The engine is options.engine, else the thread's EngineScope, else the
//   one of cohort::init() (runtime.h): training mode with none is a
//   ConfigError (init() works for a single process too).
// - The backward communicates only when grad_input is needed; that is the
//   same decision on every rank of one model.
// - Numerics: the statistics are accumulated in float64 from per-rank
//   values shifted by the rank's own mean, so E[x^2] - mean^2 does not
//   cancel catastrophically even for float32 inputs with a large mean.
// - Parameter and buffer names (weight, bias, running_mean, running_var,
//   num_batches_tracked) are BatchNorm's, so state dicts and checkpoints
//   are interchangeable.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <optional>
#include <ostream>

#include "cohort/engine/engine.h"

namespace cohort {

struct SyncBatchNormOptions {
  int64_t num_features = 0;  // C, > 0
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative moving average
  bool affine = true;                    // learnable weight and bias
  bool track_running_stats = true;
  engine::Engine* engine = nullptr;  // null: see runtime.h
};

// The same settings as a torch::nn::BatchNorm's options.
SyncBatchNormOptions sync_batch_norm_options(const torch::nn::BatchNormOptions& options,
                                             engine::Engine* engine = nullptr);

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(SyncBatchNormOptions{num_features}) {}
  explicit SyncBatchNormImpl(const SyncBatchNormOptions& options);

  at::Tensor forward(const at::Tensor& input);

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  SyncBatchNormOptions options;
  at::Tensor weight;               // (C) when affine, else undefined
  at::Tensor bias;                 // (C) when affine, else undefined
  at::Tensor running_mean;         // (C) when track_running_stats, else undefined
  at::Tensor running_var;          // (C) when track_running_stats, else undefined
  at::Tensor num_batches_tracked;  // int64 scalar when track_running_stats
};

// The module holder (what TORCH_MODULE would declare; the macro names
// torch::nn unqualified, which resolves to the wrong namespace in here).
class SyncBatchNorm : public torch::nn::ModuleHolder<SyncBatchNormImpl> {
 public:
  using torch::nn::ModuleHolder<SyncBatchNormImpl>::ModuleHolder;
  using Impl = SyncBatchNormImpl;
};

// A copy of `sequential` in which every BatchNorm1d/2d/3d child is replaced by a SyncBatchNorm with the same options,
// weights and running statistics (copied: build the optimizer after the
// conversion). Other children are shared with `sequential`, not cloned.
// Only direct children are converted (LibTorch cannot nest a Sequential in a
// Sequential; convert a custom module's Sequential members one by one).
torch::nn::Sequential convert_sync_batch_norm(const torch::nn::Sequential& sequential,
                                                engine::Engine* engine = nullptr);

}  // namespace cohort
