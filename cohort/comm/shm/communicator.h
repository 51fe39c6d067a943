// The shm communicator: ranks on one host, through one POSIX shared-memory
// segment (see segment.h).
//
// Every collective is a sequence of steps. In a step each rank may write its
// staging slot, then publishes its step counter; ranks that need its data
// wait for that counter and read. Slots are double buffered: a rank writes
// buffer (step & 1) only after every peer has published the step before, which
// proves they are done reading what it wrote two steps ago. Large messages
// are cut into slot-sized chunks and pipelined, so the segment never grows
// with the message and the slots stay cache resident.
//
// Allreduce: up to COHORT_SHM_SMALL_BYTES every rank copies its input to its
// slot and reduces all slots in rank order (one step, identical results on
// every rank). Above, each chunk is reduce-scattered (rank r reduces piece r
// of every rank's chunk straight from its own input and its peers' slots)
// and then allgathered: two steps, about one memcpy of memory traffic.
//
// Waiting ranks spin briefly (COHORT_SPIN_US; none when ranks outnumber
// cores) and then sleep on a futex, probing every COHORT_PEER_CHECK_MS for a
// dead peer (pidfd), a peer that left, or an abort published by a failing
// rank. Every failure aborts the group: the first failing rank records why
// and whom it blames (for a lost peer: that peer, not itself), and every
// other rank raises an error carrying that reason.
//
// A peer that died or left is a failure only for a step it never published:
// its last published step stays valid, so a rank that reaches the end of the
// last collective and exits is no failure for a slower rank finishing that
// collective. A probe therefore looks at the awaited counter again after it
// has seen a failure, and returns quietly when the wait has in fact
// completed; a collective whose data has all arrived completes, and the
// failure surfaces at the next wait that needs the lost peer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/comm/shm/segment.h"
#include "cohort/comm/shm/wait.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm::shm {

struct Options {
  std::chrono::milliseconds timeout{300000};
  size_t slot_bytes = 256 * 1024;  // per rank and buffer; rank 0's value wins
  size_t small_bytes = 16 * 1024;  // one-step allreduce up to this size
  std::chrono::microseconds spin{-1};  // -1: 50 us when ranks fit the cores, else 0
  std::chrono::milliseconds probe_interval{100};
  std::string job_id = "local";
  // World rank of each member, for messages; empty means identity.
  std::vector<int> world_ranks;
  // Elastic worlds (comm/create.h's CommunicatorOptions::abandoned): asked
  // at most once a probe interval while a rank waits; a reason returned
  // means the launcher abandoned the world (a member lost, maybe outside
  // this group: a group split from the world, whose members left a
  // collective for the next epoch) and the group fails with PeerLostError.
  std::function<std::optional<std::string>()> abandoned;
};

// The options from the COHORT_* tunables.
Options options_from_env();

class Communicator final : public comm::Communicator {
 public:
  // Collective over the `size` ranks that pass the same `store` namespace.
  Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options);
  ~Communicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }

  void allreduce(BufferView send, BufferView recv, const AllreduceOptions& options = {}) override;
  using comm::Communicator::allreduce;
  void broadcast(BufferView buffer, int root) override;
  void allgather(BufferView send, BufferView recv) override;
  void allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) override;
  void reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options = {}) override;
  void alltoall(BufferView send, BufferView recv) override;
  void alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                 std::span<const size_t> recv_counts) override;
  void gather(BufferView send, BufferView recv, int root) override;
  void scatter(BufferView send, BufferView recv, int root) override;
  void barrier() override;
  void send(BufferView buffer, int dst, uint32_t tag) override;
  void recv(BufferView buffer, int src, uint32_t tag) override;
  std::unique_ptr<comm::Communicator> split(int color, int key) override;

  // The segment's size in bytes (for tests: it must not grow with messages).
  size_t segment_bytes() const { return segment_.geometry().total_bytes(); }

 private:
  class Probe;
  friend class Probe;

  // A peer that died or left before publishing what this rank needs.
  struct Loss {
    int rank = -1;
    bool died = false;  // its process exited; else it destroyed its communicator
    Departure departure = Departure::present;
  };

  // Step machinery (see the file comment).
  void begin_write();
  void publish_step();
  // Waits until `flag` (of `peer`) reaches `target`, probing for failures;
  // false when the deadline passes first.
  bool await(int peer, const Flag& flag, uint32_t target);
  void wait_peer(int peer);
  void wait_all_peers();
  std::byte* my_slot() const { return segment_.slot(rank_, step_ & 1); }
  const std::byte* peer_slot(int peer) const { return segment_.slot(peer, (step_ - 1) & 1); }

  void allreduce_small(BufferView send, BufferView recv, ReduceOp op);
  void allreduce_large(BufferView send, BufferView recv, ReduceOp op);
  // Shared by reduce_scatter, alltoall, scatter: block p of `send` goes to
  // rank p, chunk by chunk; `consume` takes what arrived for this rank.
  template <typename Consume>
  void exchange_blocks(BufferView send, size_t block, bool writes, Consume&& consume);

  // Failure handling: record the reason in the segment so peers fail too.
  // `culprit` is the rank blamed (this rank unless a peer was lost).
  [[noreturn]] void fail(AbortKind kind, const std::string& message, int culprit);
  [[noreturn]] void fail(AbortKind kind, const std::string& message) { fail(kind, message, rank_); }
  void probe(int awaited, const Flag& flag, uint32_t target);
  void check_abandoned(const Flag& flag, uint32_t target);
  std::optional<Loss> find_lost_peer(int awaited) const;
  bool process_exited(int peer) const;
  void raise_recorded(uint32_t state);
  [[noreturn]] void raise_lost(const Loss& loss, int awaited);
  std::string describe_rank(int r) const;
  std::string describe_current() const;
  void begin_collective(const char* name, Signature sig);
  [[noreturn]] void mismatch(int peer, const Signature& theirs);

  std::shared_ptr<rendezvous::Store> store_;
  int rank_;
  int size_;
  Options options_;
  Segment segment_;
  WaitPolicy policy_;
  uint32_t step_ = 0;           // steps this rank has published
  std::vector<uint32_t> sent_;  // chunks sent to each rank
  std::vector<uint32_t> taken_; // chunks received from each rank
  std::vector<int> pidfds_;     // -1 for ranks in this process
  std::vector<const void*> srcs_;  // reduction sources, reused
  std::string host_;
  const char* op_name_ = "";
  Signature current_;
  Clock::time_point deadline_;
  // When this rank first found the abort record claimed but not yet written.
  std::optional<Clock::time_point> claim_seen_;
  int splits_ = 0;
  bool failed_ = false;
  Clock::time_point next_abandon_check_{};
  bool abandon_unknown_ = false;  // the store that says so is gone
};

}  // namespace cohort::comm::shm
