#include "cohort/data/epoch_plan.h"

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort::data {

EpochPlan::EpochPlan(const Cursor& cursor, const std::vector<uint64_t>& file_starts, int world, int64_t batch_size)
    : cursor_(cursor), world_(world), batch_size_(batch_size) {
  COHORT_CHECK_AS(ConfigError, world >= 1) << "world size " << world;
  COHORT_CHECK_AS(ConfigError, batch_size >= 1) << "batch size " << batch_size;
  cursor_.validate();
  COHORT_CHECK(!file_starts.empty() && file_starts.back() == cursor.dataset_size)
      << "file starts do not cover the data set";

  // Q: the complement of the cursor, as ranges.
  uint64_t from = cursor_.consumed;
  for (const PositionRange& r : cursor_.also_consumed) {
    free_.push_back({from, r.begin});
    from = r.end;
  }
  if (from < cursor_.dataset_size) free_.push_back({from, cursor_.dataset_size});
  std::erase_if(free_, [](const PositionRange& r) { return r.begin == r.end; });
  free_prefix_.push_back(0);
  for (const PositionRange& r : free_) free_prefix_.push_back(free_prefix_.back() + (r.end - r.begin));
  const uint64_t q = remaining();

  counts_.assign(size_t(world), 0);
  if (cursor_.order.sharding == Sharding::by_record) {
    for (int r = 0; r < world; ++r) counts_[size_t(r)] = q > uint64_t(r) ? (q - uint64_t(r) + world - 1) / world : 0;
  } else {
    // Each file's positions left form one Q range (a file is a contiguous
    // run of positions, and Q keeps position order).
    segments_.assign(size_t(world), {});
    segment_prefix_.assign(size_t(world), {0});
    uint64_t dealt = 0;  // files with positions left, dealt so far
    size_t range = 0;
    for (size_t f = 0; f + 1 < file_starts.size(); ++f) {
      // Q indices of positions in [file_starts[f], file_starts[f+1]).
      auto q_index_of = [&](uint64_t position) {
        // The first Q index whose position is >= `position`.
        while (range < free_.size() && free_[range].end <= position) ++range;
        if (range == free_.size()) return q;
        return free_prefix_[range] + (position > free_[range].begin ? position - free_[range].begin : 0);
      };
      const uint64_t q0 = q_index_of(file_starts[f]);
      const uint64_t q1 = q_index_of(file_starts[f + 1]);
      if (q1 == q0) continue;
      const int r = int(dealt++ % uint64_t(world));
      segments_[size_t(r)].push_back({q0, q1});
      segment_prefix_[size_t(r)].push_back(segment_prefix_[size_t(r)].back() + (q1 - q0));
      counts_[size_t(r)] += q1 - q0;
    }
  }
  for (uint64_t c : counts_) steps_ = std::max(steps_, int64_t((c + uint64_t(batch_size) - 1) / uint64_t(batch_size)));
}

int64_t EpochPlan::batch_items(int rank, int64_t b) const {
  const uint64_t begin = uint64_t(b) * uint64_t(batch_size_);
  const uint64_t n = count(rank);
  return begin >= n ? 0 : int64_t(std::min<uint64_t>(uint64_t(batch_size_), n - begin));
}

uint64_t EpochPlan::q_position(uint64_t j) const {
  COHORT_CHECK_LT(j, remaining()) << "Q index out of range";
  const size_t i = size_t(std::upper_bound(free_prefix_.begin(), free_prefix_.end(), j) - free_prefix_.begin() - 1);
  return free_[i].begin + (j - free_prefix_[i]);
}

uint64_t EpochPlan::position(int rank, uint64_t k) const {
  COHORT_CHECK_LT(k, count(rank)) << "item outside rank " << rank << "'s stream";
  if (cursor_.order.sharding == Sharding::by_record) return q_position(k * uint64_t(world_) + uint64_t(rank));
  const auto& prefix = segment_prefix_[size_t(rank)];
  const size_t s = size_t(std::upper_bound(prefix.begin(), prefix.end(), k) - prefix.begin() - 1);
  return q_position(segments_[size_t(rank)][s].begin + (k - prefix[s]));
}

void EpochPlan::q_ranges(int rank, uint64_t k0, uint64_t k1, std::vector<QRange>& out) const {
  if (k0 >= k1) return;
  if (cursor_.order.sharding == Sharding::by_record) {
    for (uint64_t k = k0; k < k1; ++k) {
      const uint64_t j = k * uint64_t(world_) + uint64_t(rank);
      out.push_back({j, j + 1});
    }
    return;
  }
  const auto& segments = segments_[size_t(rank)];
  const auto& prefix = segment_prefix_[size_t(rank)];
  for (size_t s = 0; s < segments.size(); ++s) {
    const uint64_t lo = std::max(k0, prefix[s]), hi = std::min(k1, prefix[s + 1]);
    if (lo < hi) out.push_back({segments[s].begin + (lo - prefix[s]), segments[s].begin + (hi - prefix[s])});
  }
}

void EpochPlan::position_ranges(uint64_t q0, uint64_t q1, std::vector<PositionRange>& out) const {
  if (q0 >= q1) return;
  size_t i = size_t(std::upper_bound(free_prefix_.begin(), free_prefix_.end(), q0) - free_prefix_.begin() - 1);
  for (uint64_t j = q0; j < q1; ++i) {
    const uint64_t in_range = std::min(q1, free_prefix_[i + 1]) - j;
    const uint64_t begin = free_[i].begin + (j - free_prefix_[i]);
    out.push_back({begin, begin + in_range});
    j += in_range;
  }
}

Cursor EpochPlan::advance(std::span<const RankProgress> progress) const {
  COHORT_CHECK_EQ(progress.size(), size_t(world_)) << "progress of every rank";
  const uint64_t w = uint64_t(world_), b = uint64_t(batch_size_);
  std::vector<QRange> q;  // Q indices delivered
  uint64_t delivered = 0;
  uint64_t prefix_end = 0;  // by_record: Q[0, prefix_end) delivered by the in-order prefixes together
  std::vector<uint64_t> in_order_items(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    const RankProgress& p = progress[size_t(r)];
    COHORT_CHECK(p.in_order >= 0 && p.in_order <= steps_) << "rank " << r << " delivered " << p.in_order
                                                           << " batches in order of " << steps_;
    in_order_items[size_t(r)] = std::min(uint64_t(p.in_order) * b, count(r));
  }
  if (cursor_.order.sharding == Sharding::by_record) {
    // Q index j = k*W + r is delivered when k < in_order_items[r]; below
    // min_r(items_r * W + r) every index is (each rank's prefix reaches it).
    prefix_end = remaining();
    for (int r = 0; r < world_; ++r)
      prefix_end = std::min(prefix_end, in_order_items[size_t(r)] * w + uint64_t(r));
    q.push_back({0, prefix_end});
  }
  for (int r = 0; r < world_; ++r) {
    const RankProgress& p = progress[size_t(r)];
    uint64_t from = 0;
    if (cursor_.order.sharding == Sharding::by_record)  // the items past the common prefix
      from = prefix_end > uint64_t(r) ? (prefix_end - uint64_t(r) + w - 1) / w : 0;
    q_ranges(r, from, in_order_items[size_t(r)], q);
    delivered += in_order_items[size_t(r)];
    for (int64_t extra : p.extra) {
      COHORT_CHECK(extra >= p.in_order && extra < steps_)
          << "rank " << r << ": batch " << extra << " is not past its in-order prefix " << p.in_order;
      const uint64_t k0 = uint64_t(extra) * b, k1 = std::min(k0 + b, count(r));
      if (k0 >= k1) continue;
      q_ranges(r, k0, k1, q);
      delivered += k1 - k0;
    }
  }
  Cursor next = cursor_;
  std::vector<PositionRange> ranges = cursor_.also_consumed;
  for (const QRange& qr : q) position_ranges(qr.begin, qr.end, ranges);
  normalise(next.consumed, ranges);
  next.also_consumed = std::move(ranges);
  COHORT_CHECK_EQ(next.delivered(), cursor_.delivered() + delivered)
      << "progress counts a position twice (a batch listed in order and as extra?)";
  return next;
}

}  // namespace cohort::data
