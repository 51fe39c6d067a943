#include "cohort/engine/response_cache.h"

#include "cohort/common/check.h"

namespace cohort::engine {

int ResponseCache::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int ResponseCache::insert(const std::string& name, const OpMeta& meta, uint64_t cycle,
                          const std::vector<bool>& busy) {
  COHORT_CHECK(!index_.contains(name)) << "response cache already holds '" << name << "'";
  if (capacity_ == 0) return -1;
  int slot = -1;
  // A freed slot that some rank still set this cycle (an eviction) is not
  // reused in the same cycle, so that this cycle's bits keep one meaning.
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!slots_[s] && !(s < busy.size() && busy[s])) {
      slot = static_cast<int>(s);
      break;
    }
  if (slot < 0 && slots_.size() < capacity_) {
    slots_.emplace_back();
    slot = static_cast<int>(slots_.size() - 1);
  }
  if (slot < 0) {
    // Full: evict the least recently run slot that nobody waits on.
    for (size_t s = 0; s < slots_.size(); ++s) {
      if ((s < busy.size() && busy[s]) || !slots_[s]) continue;
      if (slot < 0 || slots_[s]->last_used < slots_[size_t(slot)]->last_used) slot = static_cast<int>(s);
    }
    if (slot < 0) return -1;
    erase(slot);
  }
  slots_[size_t(slot)] = Entry{name, meta, cycle};
  index_.emplace(name, slot);
  return slot;
}

void ResponseCache::erase(int slot) {
  COHORT_CHECK(occupied(slot)) << "response cache slot " << slot << " is empty";
  index_.erase(slots_[size_t(slot)]->name);
  slots_[size_t(slot)].reset();
}

}  // namespace cohort::engine
