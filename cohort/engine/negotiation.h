// Negotiator: the replicated decision step of an engine cycle.
//
// There is no separate coordinator process state: every rank of the group
// holds an identical Negotiator and feeds it the same inputs (every rank's
// CycleState record and negotiation payload, gathered by one allgather and
// one allgatherv), so every rank reaches the same decision without a
// broadcast. Rank 0 plays the coordinator only for what does not affect the
// decision: logging stalls, writing the timeline, and the linger vote.
//
// One cycle, in order:
//  1. Joined ranks (flag kJoined) are noted; the last rank to join is the
//     highest rank among those that joined in the latest cycle where any did.
//  2. Cached ops: slot b is ready when every active (not joined) rank has set
//     bit b and at least one rank has (joined ranks contribute the identity).
//  3. Payload entries are recorded per name and rank, in rank order. An entry
//     for a cached name means that rank's OpMeta changed: the slot is evicted
//     and the ranks that had set its bit are recorded with the cached OpMeta.
//  4. A name is complete when every active rank has recorded it. Complete
//     names whose OpMetas all agree run and take a cache slot; otherwise
//     every rank fails that name with a MismatchError naming the tensor, the
//     ranks and what each sent. Nothing waits longer than the cycle in which
//     the last rank reports.
//  5. Ordered ops: position i of the window runs when every active rank has
//     offered it; the signatures of every rank that offered it must agree,
//     else that position fails on every rank with a MismatchError.
// The execution order is cached slots in slot order, then newly agreed names
// in completion order, then ordered positions: the same on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/engine/cycle_state.h"
#include "cohort/engine/op.h"
#include "cohort/engine/response_cache.h"

namespace cohort::engine {

struct ReadyOp {
  std::string name;  // empty for ordered ops
  OpMeta meta;       // agreed meta (named) or a representative signature (ordered)
  int slot = -1;     // cache slot, -1 when not cached
  bool ordered = false;
  size_t ordered_position = 0;  // position in the ordered window
  // Ranks that submitted the op: the others (joined ranks) contribute the
  // identity, and avg divides by `contributors`. Empty `holders`: all ranks.
  int contributors = 0;
  std::vector<bool> holders;
  bool held_by(int rank) const { return holders.empty() || holders[size_t(rank)]; }
};

struct NamedFailure {
  std::string name;
  std::string message;
};

struct Decision {
  std::vector<ReadyOp> ready;                // execution order
  std::vector<NamedFailure> mismatches;      // names that fail on every rank
  std::vector<int> evicted_slots;            // cached requests now recorded by name
  size_t ordered_consumed = 0;               // window positions that ran or failed
  std::vector<std::string> ordered_failures; // per consumed position: "" or the message
  uint64_t ordered_first_sequence = 0;       // sequence number of position 0
  int active_ranks = 0;                      // ranks not joined (the divisor of avg)
  bool all_joined = false;                   // every rank is in join(): join completes
  int last_joined = -1;                      // valid when all_joined
  size_t cache_hits_ready = 0;               // ready through the bit path
  bool negotiated = false;                   // payloads were exchanged
};

class Negotiator {
 public:
  Negotiator(int size, size_t cache_capacity);

  const ResponseCache& cache() const { return cache_; }
  int size() const { return size_; }

  // One cycle. `states[r]` is rank r's record; `payloads[r]` its payload
  // bytes (empty when it sent none). Throws Error on malformed input (a bug
  // or a corrupted peer): the caller treats it as an engine failure.
  void decide(std::span<const CycleStateView> states, std::span<const std::span<const std::byte>> payloads,
              uint64_t cycle, Decision& out);

  // The ops some ranks have submitted and others not, as of the last
  // decide(): fn(description, present) with present[r] true for ranks that
  // submitted it. Joined ranks count as present. For the stall inspector.
  void for_each_waiting(std::span<const CycleStateView> states,
                        const std::function<void(const std::string&, const std::vector<bool>&)>& fn) const;

 private:
  struct Pending {
    std::vector<std::optional<OpMeta>> metas;  // by rank
    size_t present = 0;
    bool queued = false;  // already on this cycle's completion list
  };
  bool complete(const Pending& p) const;
  std::string mismatch_message(const std::string& name, const Pending& p) const;

  int size_;
  ResponseCache cache_;
  std::map<std::string, Pending> table_;  // ordered: deterministic scans
  std::vector<bool> joined_;
  int last_joined_ = -1;
  uint64_t ordered_sequence_ = 0;
  size_t last_ordered_consumed_ = 0;
  // Scratch reused across cycles.
  std::vector<uint64_t> and_active_, or_all_;
  std::vector<bool> busy_;
  std::vector<std::string> completed_;
};

}  // namespace cohort::engine
