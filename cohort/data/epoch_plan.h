// EpochPlan: which positions each rank delivers, in which batches, from a
// cursor on; and the cursor that results from what the ranks delivered.
//
// The positions not yet delivered (the cursor's complement, in increasing
// order) form a queue Q. With W ranks and batches of B:
//   by_record  rank r takes Q[r], Q[r + W], Q[r + 2W], ...: every rank's
//              count differs from the others' by at most one, and batch b of
//              all ranks together is Q[bBW .. (b+1)BW), the global batch one
//              rank with batch BW would see.
//   by_file    the files with positions left are dealt round-robin, whole:
//              rank r takes the (r + kW)-th of them, its positions in order.
// Rank r's batch b holds its stream's items [bB, (b+1)B), so a rank's last
// batches may be short or empty. steps() is the same on every rank (the
// largest rank's batch count): ranks run the same number of steps, and
// none pads with duplicates.
//
// Every rank builds the same plan from the same (cursor, W, B); a plan
// knows every rank's stream, so advance() can turn all ranks' progress into
// the next cursor without asking anyone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/data/cursor.h"

namespace cohort::data {

// What one rank has delivered of its batches in the current plan: batches
// [0, in_order) and those in `extra` (each >= in_order).
struct RankProgress {
  int64_t in_order = 0;
  std::vector<int64_t> extra;
  bool operator==(const RankProgress&) const = default;
};

class EpochPlan {
 public:
  // `file_starts` as EpochOrder::file_starts() for this cursor's epoch.
  EpochPlan(const Cursor& cursor, const std::vector<uint64_t>& file_starts, int world, int64_t batch_size);

  int world() const { return world_; }
  int64_t batch_size() const { return batch_size_; }
  // Positions left to deliver, over all ranks.
  uint64_t remaining() const { return free_prefix_.back(); }
  // Items rank `rank` delivers.
  uint64_t count(int rank) const { return counts_[size_t(rank)]; }
  int64_t steps() const { return steps_; }
  // Items in batch `b` of `rank` (0 .. batch_size).
  int64_t batch_items(int rank, int64_t b) const;
  // The position of item `k` of `rank`'s stream.
  uint64_t position(int rank, uint64_t k) const;

  // The cursor after every rank r delivered progress[r] (world() entries).
  Cursor advance(std::span<const RankProgress> progress) const;

 private:
  struct QRange {  // Q indices [begin, end)
    uint64_t begin, end;
  };
  uint64_t q_position(uint64_t j) const;
  // The Q indices of items [k0, k1) of `rank`'s stream, as ranges.
  void q_ranges(int rank, uint64_t k0, uint64_t k1, std::vector<QRange>& out) const;
  // Appends the positions of Q indices [q0, q1) as position ranges.
  void position_ranges(uint64_t q0, uint64_t q1, std::vector<PositionRange>& out) const;

  Cursor cursor_;
  int world_;
  int64_t batch_size_;
  std::vector<PositionRange> free_;     // positions not yet delivered, in order
  std::vector<uint64_t> free_prefix_;   // Q index of each free range's first position, then |Q|
  std::vector<uint64_t> counts_;        // per rank
  int64_t steps_ = 0;
  // by_file: each rank's stream as Q ranges, and their prefix counts.
  std::vector<std::vector<QRange>> segments_;
  std::vector<std::vector<uint64_t>> segment_prefix_;
};

}  // namespace cohort::data
