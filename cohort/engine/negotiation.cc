#include "cohort/engine/negotiation.h"

#include <algorithm>
#include <bit>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/engine/wire.h"

namespace cohort::engine {
namespace {

// "rank 1" / "ranks 0, 2"
std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

// Groups ranks by what they sent, in order of first appearance:
// "rank 0, 2 sent X; rank 1 sent Y".
std::string describe_groups(const std::vector<std::pair<int, std::string>>& sent) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  // Not a structured binding: clang before 16 (Debian's, the fuzz build)
  // cannot capture one in a lambda.
  for (const auto& entry : sent) {
    const std::string& what = entry.second;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
    if (it == groups.end())
      groups.push_back({what, {entry.first}});
    else
      it->second.push_back(entry.first);
  }
  std::ostringstream os;
  for (size_t i = 0; i < groups.size(); ++i)
    os << (i ? "; " : "") << rank_list(groups[i].second) << " submitted " << groups[i].first;
  return os.str();
}

ReadyOp make_ready(const std::string& name, const OpMeta& meta, int slot, bool ordered, size_t position) {
  ReadyOp op;
  op.name = name;
  op.meta = meta;
  op.slot = slot;
  op.ordered = ordered;
  op.ordered_position = position;
  return op;
}

}  // namespace

Negotiator::Negotiator(int size, size_t cache_capacity)
    : size_(size), cache_(cache_capacity), joined_(size_t(size), false) {}

bool Negotiator::complete(const Pending& p) const {
  if (p.present == 0) return false;
  for (int r = 0; r < size_; ++r)
    if (!p.metas[size_t(r)] && !joined_[size_t(r)]) return false;
  return true;
}

std::string Negotiator::mismatch_message(const std::string& name, const Pending& p) const {
  std::vector<std::pair<int, std::string>> sent;
  for (int r = 0; r < size_; ++r)
    if (p.metas[size_t(r)]) sent.emplace_back(r, p.metas[size_t(r)]->describe());
  return "ranks disagree on tensor '" + name + "': " + describe_groups(sent);
}

void Negotiator::decide(std::span<const CycleStateView> states,
                        std::span<const std::span<const std::byte>> payloads, uint64_t cycle, Decision& out) {
  COHORT_CHECK_EQ(states.size(), size_t(size_));
  COHORT_CHECK_EQ(payloads.size(), size_t(size_));
  out.ready.clear();
  out.mismatches.clear();
  out.evicted_slots.clear();
  out.ordered_failures.clear();
  out.ordered_consumed = 0;
  out.cache_hits_ready = 0;
  out.negotiated = false;
  const size_t words = cache_.words();
  for (int r = 0; r < size_; ++r)
    COHORT_CHECK_EQ(states[size_t(r)].declared_cache_words(), uint64_t(words))
        << "rank " << r << "'s cycle record disagrees on the response cache size (engine bug)";

  // 1. Join.
  bool joined_changed = false;
  int newest = -1;
  for (int r = 0; r < size_; ++r) {
    const bool j = states[size_t(r)].has(kJoined);
    if (j && !joined_[size_t(r)]) newest = r;
    if (j != joined_[size_t(r)]) joined_changed = true;
    joined_[size_t(r)] = j;
  }
  if (newest >= 0) last_joined_ = newest;
  const int active = static_cast<int>(std::count(joined_.begin(), joined_.end(), false));
  out.active_ranks = active;
  out.all_joined = active == 0;
  out.last_joined = out.all_joined ? last_joined_ : -1;

  // 2. Cached ops ready everywhere (a joined rank stands in with the identity).
  and_active_.assign(words, ~uint64_t{0});
  or_all_.assign(words, 0);
  for (int r = 0; r < size_; ++r) {
    const auto bits = states[size_t(r)].bits();
    for (size_t w = 0; w < words; ++w) {
      or_all_[w] |= bits[w];
      if (!joined_[size_t(r)]) and_active_[w] &= bits[w];
    }
  }
  std::vector<int> ready_slots;
  for (size_t w = 0; w < words; ++w) {
    uint64_t m = and_active_[w] & or_all_[w];
    while (m) {
      const int slot = static_cast<int>(w * 64 + std::countr_zero(m));
      m &= m - 1;
      COHORT_CHECK(cache_.occupied(slot)) << "a rank set the bit of empty cache slot " << slot << " (engine bug)";
      ready_slots.push_back(slot);
    }
  }

  // 3. Payloads, in rank order.
  completed_.clear();
  auto record = [&](const std::string& name, int rank, const OpMeta& meta) {
    auto [it, inserted] = table_.try_emplace(name);
    Pending& p = it->second;
    if (inserted) p.metas.resize(size_t(size_));
    if (!p.metas[size_t(rank)]) ++p.present;
    p.metas[size_t(rank)] = meta;
    return it;
  };
  for (int r = 0; r < size_; ++r) {
    if (payloads[size_t(r)].empty()) continue;
    out.negotiated = true;
    for (auto& e : parse_payload(payloads[size_t(r)])) {
      if (const int slot = cache_.find(e.name); slot >= 0) {
        // Rank r changed this op: the slot goes, its waiters are recorded by name.
        const OpMeta cached = cache_.entry(slot).meta;
        for (int q = 0; q < size_; ++q)
          if (q != r && states[size_t(q)].bit(size_t(slot))) record(e.name, q, cached);
        cache_.erase(slot);
        out.evicted_slots.push_back(slot);
        std::erase(ready_slots, slot);
      }
      auto it = record(e.name, r, e.meta);
      if (!it->second.queued && complete(it->second)) {
        it->second.queued = true;
        completed_.push_back(e.name);
      }
    }
  }
  // A rank that joined (or left join) may complete names nobody re-reported.
  if (joined_changed || out.all_joined)
    for (auto& [name, p] : table_)
      if (!p.queued && complete(p)) {
        p.queued = true;
        completed_.push_back(name);
      }

  // 4. What runs: cached slots, then newly agreed names.
  auto set_holders = [&](ReadyOp& op, auto&& holds) {
    op.contributors = 0;
    for (int r = 0; r < size_; ++r) op.contributors += holds(r) ? 1 : 0;
    if (op.contributors == size_) return;
    op.holders.resize(size_t(size_));
    for (int r = 0; r < size_; ++r) op.holders[size_t(r)] = holds(r);
  };
  for (int slot : ready_slots) {
    const auto& e = cache_.entry(slot);
    ReadyOp& op = out.ready.emplace_back(make_ready(e.name, e.meta, slot, false, 0));
    if (active == size_)
      op.contributors = size_;
    else
      set_holders(op, [&](int r) { return states[size_t(r)].bit(size_t(slot)); });
    cache_.touch(slot, cycle);
  }
  out.cache_hits_ready = ready_slots.size();
  if (!completed_.empty()) {
    busy_.assign(cache_.slot_count(), false);
    for (size_t b = 0; b < busy_.size(); ++b)
      busy_[b] = b / 64 < words && ((or_all_[b / 64] >> (b % 64)) & 1);
    for (const auto& name : completed_) {
      auto node = table_.extract(name);
      const Pending& p = node.mapped();
      const OpMeta* first = nullptr;
      bool agree = true;
      for (const auto& m : p.metas)
        if (m) {
          if (!first)
            first = &*m;
          else if (!m->agrees_with(*first))
            agree = false;
        }
      if (!agree) {
        out.mismatches.push_back({name, mismatch_message(name, p)});
        continue;
      }
      const int slot = cache_.insert(name, *first, cycle, busy_);
      if (slot >= 0) {
        if (busy_.size() < cache_.slot_count()) busy_.resize(cache_.slot_count(), false);
        busy_[size_t(slot)] = true;  // not to be reused by a later insert this cycle
      }
      ReadyOp& op = out.ready.emplace_back(make_ready(name, *first, slot, false, 0));
      set_holders(op, [&](int r) { return p.metas[size_t(r)].has_value(); });
    }
  }

  // 5. Ordered window.
  size_t m = active > 0 ? SIZE_MAX : 0;
  for (int r = 0; r < size_; ++r) {
    const size_t c = states[size_t(r)].ordered_count();
    COHORT_CHECK_LE(c, kOrderedWindow) << "rank " << r << " offered too many ordered ops (engine bug)";
    if (active > 0) {
      if (!joined_[size_t(r)]) m = std::min(m, c);
    } else {
      m = std::max(m, c);
    }
  }
  out.ordered_first_sequence = ordered_sequence_;
  out.ordered_consumed = m;
  for (size_t i = 0; i < m; ++i) {
    const OrderedSignature* rep = nullptr;
    bool agree = true;
    std::vector<std::pair<int, std::string>> sent;
    std::vector<OrderedSignature> sigs(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (states[size_t(r)].ordered_count() <= i) continue;
      sigs[size_t(r)] = states[size_t(r)].ordered(i);
      if (!rep)
        rep = &sigs[size_t(r)];
      else if (!sigs[size_t(r)].agrees_with(*rep))
        agree = false;
    }
    if (!agree) {
      for (int r = 0; r < size_; ++r)
        if (states[size_t(r)].ordered_count() > i) sent.emplace_back(r, sigs[size_t(r)].describe());
      out.ordered_failures.push_back("ranks disagree on ordered op #" + std::to_string(ordered_sequence_ + i) +
                                     ": " + describe_groups(sent));
      continue;
    }
    out.ordered_failures.emplace_back();
    ReadyOp& op = out.ready.emplace_back(make_ready({}, rep->meta(), -1, true, i));
    set_holders(op, [&](int r) { return states[size_t(r)].ordered_count() > i; });
  }
  ordered_sequence_ += m;
  last_ordered_consumed_ = m;
}

void Negotiator::for_each_waiting(
    std::span<const CycleStateView> states,
    const std::function<void(const std::string&, const std::vector<bool>&)>& fn) const {
  std::vector<bool> present(static_cast<size_t>(size_));
  for (const auto& [name, p] : table_) {
    for (int r = 0; r < size_; ++r) present[size_t(r)] = p.metas[size_t(r)] || joined_[size_t(r)];
    fn("tensor '" + name + "'", present);
  }
  // Cached ops some ranks have set and others not (state of the last decide).
  const size_t words = std::min(or_all_.size(), cache_.words());
  for (size_t w = 0; w < words; ++w) {
    uint64_t m = or_all_[w] & ~and_active_[w];
    while (m) {
      const int slot = static_cast<int>(w * 64 + std::countr_zero(m));
      m &= m - 1;
      if (!cache_.occupied(slot)) continue;
      for (int r = 0; r < size_; ++r) present[size_t(r)] = states[size_t(r)].bit(size_t(slot)) || joined_[size_t(r)];
      fn("tensor '" + cache_.entry(slot).name + "'", present);
    }
  }
  // Ordered ops offered by some ranks only: the positions past those the last
  // decide consumed, numbered from where that window ended.
  size_t most = 0;
  for (int r = 0; r < size_; ++r) most = std::max(most, states[size_t(r)].ordered_count());
  for (size_t i = last_ordered_consumed_; i < most; ++i) {
    for (int r = 0; r < size_; ++r)
      present[size_t(r)] = states[size_t(r)].ordered_count() > i || joined_[size_t(r)];
    fn("ordered op #" + std::to_string(ordered_sequence_ + (i - last_ordered_consumed_)), present);
  }
}

}  // namespace cohort::engine
