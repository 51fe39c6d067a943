// CycleState: the fixed-size record every rank contributes to the one
// allgather that opens each engine cycle.
//
// Layout (u64 words):
//   0                flags (CycleFlag bits)
//   1                bytes of this rank's negotiation payload this cycle (0: none)
//   2                number of ordered ops offered this cycle (<= kOrderedWindow)
//   3 .. 3+2W        ordered op signatures, two words each (see OrderedSignature)
//   3+2W             number of cache words that follow (a consistency check)
//   4+2W, 5+2W       (rank 0, with kTuning) the fusion threshold in bytes and
//                    the cycle time in microseconds every rank runs this
//                    cycle with: the autotuner's choice (autotune.h)
//   6+2W ..          response-cache bits: bit b set = this rank has the op of
//                    cache slot b ready
//
// The record's size depends only on the response cache's size, which every
// rank holds identically, so every rank contributes the same number of words.
//
// Why an allgather of per-rank records rather than a bitwise-AND allreduce:
// the communicator has no bitwise AND (its ops are sum/avg/min/max/product),
// so an allreduce needs a word or byte per cached op, plus a second
// collective for the variable payload lengths. At the group sizes of one
// host an allgather of packed bits moves no more bytes (n * slots / 8), takes
// one collective, and leaves every rank with every rank's facts: exact ready
// sets under join(), payload lengths for the allgatherv that follows, and
// which rank diverged when ordered ops disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cohort/engine/op.h"

namespace cohort::engine {

enum CycleFlag : uint64_t {
  kNewWork = 1u << 0,        // this rank collected new submissions or control requests
  kJoined = 1u << 1,         // this rank is inside join()
  kShutdown = 1u << 2,       // this rank's engine is shutting down
  kFailed = 1u << 3,         // this rank's engine failed; the store's error record says why
  kLingerExpired = 1u << 4,  // (coordinator) no work seen for the linger time: may sleep
  kTuning = 1u << 5,         // (coordinator) the tuning words hold the parameters for this cycle
};

// Ordered ops offered per cycle. A window (rather than a running hash) lets
// every rank compare every rank's signature for each position before
// anything runs, and name exactly what each rank submitted on divergence.
inline constexpr size_t kOrderedWindow = 4;

// An ordered op as the others see it: word a = kind | dtype << 8 | op << 16 |
// (root + 1) << 24 | hash of (row_elements, scales, shape) << 40; word b =
// element count (an allgather's count is per rank and not compared).
struct OrderedSignature {
  uint64_t a = 0;
  uint64_t b = 0;

  static OrderedSignature of(const OpMeta& meta);
  OpKind kind() const { return static_cast<OpKind>(a & 0xff); }
  DType dtype() const { return static_cast<DType>((a >> 8) & 0xff); }
  ReduceOp op() const { return static_cast<ReduceOp>((a >> 16) & 0xff); }
  int root() const { return static_cast<int>((a >> 24) & 0xffff) - 1; }
  uint64_t count() const { return b; }
  bool agrees_with(const OrderedSignature& o) const {
    return a == o.a && (kind() == OpKind::allgather || b == o.b);
  }
  // The OpMeta that runs it (for ranks that hold no request: joined ranks).
  OpMeta meta() const;
  std::string describe() const;
};

inline constexpr size_t kCycleHeaderWords = 6 + 2 * kOrderedWindow;

inline size_t cycle_state_words(size_t cache_words) { return kCycleHeaderWords + cache_words; }

// Read access to one rank's record inside the allgathered buffer.
class CycleStateView {
 public:
  CycleStateView(const uint64_t* words, size_t cache_words) : w_(words), cache_words_(cache_words) {}
  uint64_t flags() const { return w_[0]; }
  bool has(CycleFlag f) const { return (w_[0] & f) != 0; }
  uint64_t payload_bytes() const { return w_[1]; }
  size_t ordered_count() const { return static_cast<size_t>(w_[2]); }
  OrderedSignature ordered(size_t i) const { return {w_[3 + 2 * i], w_[4 + 2 * i]}; }
  uint64_t declared_cache_words() const { return w_[3 + 2 * kOrderedWindow]; }
  uint64_t tuned_fusion_threshold() const { return w_[4 + 2 * kOrderedWindow]; }
  uint64_t tuned_cycle_time_us() const { return w_[5 + 2 * kOrderedWindow]; }
  std::span<const uint64_t> bits() const { return {w_ + kCycleHeaderWords, cache_words_}; }
  bool bit(size_t b) const { return (w_[kCycleHeaderWords + b / 64] >> (b % 64)) & 1; }

 private:
  const uint64_t* w_;
  size_t cache_words_;
};

// Write access to this rank's record (zeroed on construction).
class CycleStateWriter {
 public:
  CycleStateWriter(std::span<uint64_t> words, size_t cache_words);
  void set_flag(CycleFlag f) { w_[0] |= f; }
  void set_payload_bytes(uint64_t n) { w_[1] = n; }
  // Returns false when the window is full.
  bool offer_ordered(const OrderedSignature& s);
  void set_bit(size_t b) { w_[kCycleHeaderWords + b / 64] |= uint64_t{1} << (b % 64); }
  // Sets kTuning and the parameters (the coordinator's).
  void set_tuning(uint64_t fusion_threshold, uint64_t cycle_time_us) {
    set_flag(kTuning);
    w_[4 + 2 * kOrderedWindow] = fusion_threshold;
    w_[5 + 2 * kOrderedWindow] = cycle_time_us;
  }

 private:
  std::span<uint64_t> w_;
};

}  // namespace cohort::engine
