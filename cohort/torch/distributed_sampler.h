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
// Torch-free: usable with any data pipeline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::torch {

struct DistributedSamplerOptions {
  size_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop the tail instead of padding to equal shards
};

class DistributedSampler {
 public:
  // ConfigError for num_replicas < 1 or a rank outside [0, num_replicas).
  explicit DistributedSampler(DistributedSamplerOptions options);

  // Selects the epoch's permutation; call it at the start of every epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in training order.
  std::vector<size_t> indices() const;
  // Indices per rank (equal on every rank) and over all ranks.
  size_t num_samples() const;
  size_t total_size() const { return num_samples() * size_t(options_.num_replicas); }

  const DistributedSamplerOptions& options() const { return options_; }

 private:
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
};

// The permutation of 0..n-1 for (seed, epoch): Fisher-Yates driven by
// SplitMix64 with unbiased bounded draws (Lemire), identical on every
// platform.
std::vector<size_t> permutation(size_t n, uint64_t seed, int64_t epoch);

}  // namespace cohort::torch
