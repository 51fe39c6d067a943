#include "cohort/torch/distributed_sampler.h"

#include <numeric>

#include "cohort/common/check.h"

namespace cohort::torch {
namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), without modulo bias (Lemire's method).
  uint64_t below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<size_t> permutation(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t(0));
  // Mixing the epoch through one generator step keeps (seed, epoch) pairs
  // from colliding the way seed + epoch would.
  SplitMix64 rng(seed ^ SplitMix64(static_cast<uint64_t>(epoch)).next());
  for (size_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

DistributedSampler::DistributedSampler(DistributedSamplerOptions options) : options_(options) {
  COHORT_CHECK_AS(ConfigError, options_.num_replicas >= 1)
      << "DistributedSampler: num_replicas must be at least 1, got " << options_.num_replicas;
  COHORT_CHECK_AS(ConfigError, options_.rank >= 0 && options_.rank < options_.num_replicas)
      << "DistributedSampler: rank " << options_.rank << " is outside [0, " << options_.num_replicas << ")";
}

size_t DistributedSampler::num_samples() const {
  const size_t n = options_.dataset_size, r = size_t(options_.num_replicas);
  return options_.drop_last ? n / r : (n + r - 1) / r;
}

std::vector<size_t> DistributedSampler::indices() const {
  const size_t n = options_.dataset_size, replicas = size_t(options_.num_replicas);
  std::vector<size_t> order;
  if (options_.shuffle) {
    order = permutation(n, options_.seed, epoch_);
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), size_t(0));
  }
  const size_t total = total_size();
  // Padding repeats the order from its start (as often as needed when the
  // dataset is smaller than the number of replicas).
  for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  order.resize(total);
  std::vector<size_t> mine;
  mine.reserve(num_samples());
  for (size_t i = size_t(options_.rank); i < total; i += replicas) mine.push_back(order[i]);
  return mine;
}

}  // namespace cohort::torch
