#include "cohort/data/epoch_order.h"

#include <algorithm>
#include <numeric>

#include "cohort/common/check.h"

namespace cohort::data {
namespace {

uint64_t total(const std::vector<uint64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), uint64_t(0)); }

}  // namespace

EpochOrder::EpochOrder(const std::vector<uint64_t>& file_sizes, OrderOptions options, int64_t epoch)
    : options_(options),
      size_(total(file_sizes)),
      records_(options.sharding == Sharding::by_record && options.shuffle ? size_ : 0, options.seed, epoch) {
  if (options_.sharding == Sharding::by_record) {
    visit_starts_ = {0, size_};
    return;
  }
  std::vector<uint64_t> source_starts{0};
  for (uint64_t s : file_sizes) source_starts.push_back(source_starts.back() + s);
  const IndexPermutation files(options_.shuffle ? file_sizes.size() : 0, options_.seed, epoch);
  visit_starts_.push_back(0);
  for (uint64_t v = 0; v < file_sizes.size(); ++v) {
    const uint64_t f = options_.shuffle ? files(v) : v;
    visited_source_.push_back(source_starts[f]);
    visit_starts_.push_back(visit_starts_.back() + file_sizes[f]);
  }
}

uint64_t EpochOrder::sample_at(uint64_t position) const {
  COHORT_CHECK_LT(position, size_) << "position outside the epoch";
  if (options_.sharding == Sharding::by_record) return options_.shuffle ? records_(position) : position;
  // The visited file holding `position` (empty files occupy no positions,
  // upper_bound skips them).
  const size_t v = size_t(std::upper_bound(visit_starts_.begin(), visit_starts_.end(), position) -
                          visit_starts_.begin() - 1);
  return visited_source_[v] + (position - visit_starts_[v]);
}

}  // namespace cohort::data
