// ResponseCache: the ops every rank of a group has agreed on, each with a
// slot number ("cache bit").
//
// After an op named N has run once, a rank that submits N again with the same
// OpMeta sets bit slot(N) in its cycle state instead of reporting it; the op
// runs when every active rank has set the bit. Every rank holds an identical
// copy: the cache changes only inside the replicated negotiation step, from
// inputs every rank sees, so slot numbers mean the same thing everywhere.
//
// Capacity is bounded; when full, the least recently run slot that no rank
// is waiting on is reused (ties by lowest slot). Free slots are reused lowest
// first so that the bit vector stays as short as the working set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cohort/engine/op.h"

namespace cohort::engine {

class ResponseCache {
 public:
  struct Entry {
    std::string name;
    OpMeta meta;
    uint64_t last_used = 0;  // cycle of the last run
  };

  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  // The slot of `name`, or -1.
  int find(const std::string& name) const;
  // The entry of an occupied slot.
  const Entry& entry(int slot) const { return *slots_[size_t(slot)]; }
  bool occupied(int slot) const { return slot >= 0 && size_t(slot) < slots_.size() && slots_[size_t(slot)]; }

  // Adds `name` (absent) and returns its slot, or -1 when the cache is full
  // and every slot is `busy` (busy[slot] true: some rank is waiting on it).
  int insert(const std::string& name, const OpMeta& meta, uint64_t cycle, const std::vector<bool>& busy);
  void erase(int slot);
  void touch(int slot, uint64_t cycle) { slots_[size_t(slot)]->last_used = cycle; }

  // Slots in use or freed (the bit vector's length); never shrinks.
  size_t slot_count() const { return slots_.size(); }
  size_t words() const { return (slots_.size() + 63) / 64; }
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::vector<std::optional<Entry>> slots_;
  std::unordered_map<std::string, int> index_;
};

}  // namespace cohort::engine
