#include "cohort/torch/data/distributed_sampler.h"

#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <algorithm>
#include <numeric>

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
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

namespace {

DistributedSamplerOptions with_runtime_defaults(DistributedSamplerOptions options) {
  if (options.rank == -1 || options.num_replicas == -1) {
    engine::Engine* engine = nullptr;
    try {
      engine = &current_engine();
    } catch (const ConfigError&) {
      COHORT_THROW(ConfigError) << "DistributedSampler: rank and num_replicas come from the runtime by default; "
                                   "call cohort::init() first, or set .rank and .num_replicas";
    }
    if (options.rank == -1) options.rank = engine->rank();
    if (options.num_replicas == -1) options.num_replicas = engine->size();
  }
  return options;
}

}  // namespace

DistributedSampler::DistributedSampler(DistributedSamplerOptions options)
    : options_(with_runtime_defaults(options)) {
  COHORT_CHECK_AS(ConfigError, options_.num_replicas >= 1)
      << "DistributedSampler: num_replicas must be at least 1, got " << options_.num_replicas;
  COHORT_CHECK_AS(ConfigError, options_.rank >= 0 && options_.rank < options_.num_replicas)
      << "DistributedSampler: rank " << options_.rank << " is outside [0, " << options_.num_replicas << ")";
}

size_t DistributedSampler::num_samples() const {
  const size_t n = options_.dataset_size, r = size_t(options_.num_replicas);
  return options_.drop_last ? n / r : (n + r - 1) / r;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  epoch_started_ = false;
}

at::Tensor DistributedSampler::index_tensor() const {
  const std::vector<size_t> mine = indices();
  return torch::tensor(std::vector<int64_t>(mine.begin(), mine.end()), torch::kInt64);
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size) options_.dataset_size = *new_size;
  if (epoch_started_) ++epoch_;
  epoch_started_ = true;
  epoch_indices_ = indices();
  position_ = 0;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (!epoch_started_) reset();  // a sampler read without a loader's reset()
  if (position_ >= epoch_indices_.size()) return torch::nullopt;
  const size_t end = std::min(epoch_indices_.size(), position_ + batch_size);
  std::vector<size_t> batch(epoch_indices_.begin() + int64_t(position_), epoch_indices_.begin() + int64_t(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(epoch_, torch::kInt64), /*is_buffer=*/true);
  archive.write("position", torch::tensor(int64_t(position_), torch::kInt64), /*is_buffer=*/true);
  archive.write("started", torch::tensor(int64_t(epoch_started_), torch::kInt64), /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch = torch::empty(1, torch::kInt64), position = torch::empty(1, torch::kInt64),
             started = torch::empty(1, torch::kInt64);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  archive.read("started", started, /*is_buffer=*/true);
  epoch_ = epoch.item<int64_t>();
  epoch_started_ = started.item<int64_t>() != 0;
  epoch_indices_ = epoch_started_ ? indices() : std::vector<size_t>{};
  position_ = std::min(size_t(position.item<int64_t>()), epoch_indices_.size());
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

}  // namespace cohort
