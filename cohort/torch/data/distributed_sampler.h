// DistributedSampler: which examples of a dataset each rank trains on in an
// epoch (PyTorch's DistributedSampler, for C++).
//
// Every epoch, the indices 0..N-1 are permuted from (seed, epoch) (or kept
// in order without shuffle), made a multiple of the number of replicas
// (padded by repeating the first indices, or by dropping the tail with
// drop_last), and dealt out round-robin: rank r gets positions r, r+R,
// r+2R, ... Consequences:
// - Deterministic: the same (size, seed, epoch) gives the same shards on
//   every machine and run (a portable generator, not std::shuffle).
// - Disjoint: without padding, each example lands on exactly one rank per
//   epoch; with padding, the (total - N) padded examples appear twice.
// - Same batches as one rank: batch b of every rank together is exactly
//   batch b of one rank reading the same permutation with R times the batch,
//   so R ranks with batch B train on the same global batches as one rank
//   with batch R*B.
//
// It is also a torch::data sampler, so a LibTorch data loader reads this
// rank's shard:
//
//   cohort::DistributedSampler sampler({.dataset_size = *dataset.size()});
//   auto loader = torch::data::make_data_loader(dataset, sampler, /*batch_size=*/64);
//   for (int epoch = 0; epoch < epochs; ++epoch)
//     for (auto& batch : *loader) { ... }      // each pass is the next epoch
//
// The loader keeps its own copy of the sampler, which the program cannot
// reach to call set_epoch(); so every reset() (each `begin()` of the loader)
// starts the next epoch by itself: the first reset starts epoch 0 (or the one
// given to set_epoch()), each later one the epoch after.
#pragma once

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace cohort {

struct DistributedSamplerOptions {
  size_t dataset_size = 0;
  // -1: the ranks of the runtime's current engine (the thread's
  // EngineScope, else cohort::init()'s world).
  int num_replicas = -1;
  int rank = -1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop the tail instead of padding to equal shards
};

class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  // ConfigError for num_replicas < 1, a rank outside [0, num_replicas), or
  // -1 for either with no engine to take it from.
  explicit DistributedSampler(DistributedSamplerOptions options);

  // Selects the epoch's permutation for indices(), and the epoch the next
  // reset() starts.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in training order.
  std::vector<size_t> indices() const;
  // The same as an int64 tensor, ready for index_select.
  at::Tensor index_tensor() const;
  // Indices per rank (equal on every rank) and over all ranks.
  size_t num_samples() const;
  size_t total_size() const { return num_samples() * size_t(options_.num_replicas); }

  const DistributedSamplerOptions& options() const { return options_; }

  // torch::data::samplers::Sampler: reset() starts the next epoch (see the
  // top of this file), with the dataset's new size if one is given; next()
  // returns up to batch_size of this rank's indices, nullopt at the end of
  // the epoch; save()/load() carry the epoch and the position in it.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  bool epoch_started_ = false;  // a reset() has started epoch_
  std::vector<size_t> epoch_indices_;  // indices() of the epoch being read by next()
  size_t position_ = 0;
};

// The permutation of 0..n-1 for (seed, epoch): Fisher-Yates driven by
// SplitMix64 with unbiased bounded draws (Lemire), identical on every
// platform.
std::vector<size_t> permutation(size_t n, uint64_t seed, int64_t epoch);

}  // namespace cohort
