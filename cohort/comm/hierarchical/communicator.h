// The hierarchical communicator: shared memory inside each host, a flat
// cross-host communicator (gloo or mpi) between hosts.
//
// Construction (collective over every rank of `flat`): ranks exchange host
// key hashes (common/host_key.h) over `flat` and compute the same Topology; each
// host's ranks form an shm communicator (local), and the ranks with local
// rank k < M form cross communicator k over the hosts, ordered by host, split
// from `flat` (M = the smallest number of ranks on any host).
//
// Allreduce, large messages, in chunks of Options::chunk_bytes (each a
// multiple of M elements), for hosts with exactly M ranks:
//   1. local reduce-scatter: local rank k gets slice k of the host's sum;
//   2. cross allreduce of slice k over cross communicator k: the M slices
//      travel between hosts in parallel, one ring per local rank;
//   3. local allgather of the slices.
// Chunks are pipelined: step 2 of chunk c runs on a helper thread (the only
// thread using the cross communicator meanwhile) while this thread does
// step 3 of chunk c-1 and step 1 of chunk c+1, so the shared-memory work
// hides behind the network's.
// A host with more than M ranks (uneven hosts, e.g. 1, 2 and 2 ranks) does a
// local allreduce instead of step 1, its local ranks k < M take part in step
// 2 with slice k, and step 3 is a local broadcast of each slice from its
// owner; its other ranks only take part locally. Elements left over when the
// count is not a multiple of M, and messages up to Options::small_bytes, go
// the short way: local allreduce, cross allreduce among local rank 0s, local
// broadcast. Every rank ends with the same bits (each slice is reduced once,
// by the cross communicator, and copied). avg runs as a sum and divides once;
// for f16/bf16 the whole allreduce runs in f32 (f32_average.h).
//
// Broadcast: the root's host broadcasts locally, then slice k crosses to the
// other hosts over cross communicator k, which gather the slices locally
// (allgather, or one broadcast per slice on uneven hosts); small messages go
// through local rank 0s. Allgather, when every host has the same number of
// ranks and each host's ranks are consecutive: local allgather into the
// host's block, local rank 0s exchange host blocks, local broadcast of the
// others. Everything else (allgatherv, reduce_scatter, alltoall(v), gather,
// scatter, barrier, send/recv, and allgather on other layouts) runs on
// `flat`. One host: every collective runs on the local communicator; one
// rank per host: on `flat`.
//
// Memory: scratch buffers of at most 2 x chunk_bytes, whatever the message.
// Failures: the error of the part that failed is raised (TimeoutError or
// PeerLostError from the cross-host communicator, naming the peer); the
// local group is torn down at once so that this host's other ranks raise
// PeerLostError instead of waiting out their timeout.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/comm/hierarchical/topology.h"
#include "cohort/comm/shm/communicator.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm::hierarchical {

struct Options {
  std::string host_key;             // empty: host_key() (COHORT_HOST, else host/boot id/netns)
  size_t chunk_bytes = 4 << 20;     // pipeline unit of large messages; bounds the scratch buffer
  size_t small_bytes = 64 << 10;    // up to this, allreduce and broadcast go through local rank 0s
  shm::Options shm;                 // the local communicators' options (job id, timeout, ...)
};

// shm options from the COHORT_* tunables, the rest at their defaults.
Options options_from_env();

class Communicator final : public comm::Communicator {
 public:
  // Collective over every rank of `flat`, which must reach every rank (it
  // carries the cross-host traffic); this communicator owns it. `store` is a
  // namespace of its own for the shm groups (not the one `flat` uses).
  Communicator(std::unique_ptr<comm::Communicator> flat, std::shared_ptr<rendezvous::Store> store,
               Options options);
  ~Communicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "hierarchical"; }

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
  // A hierarchical communicator over the members (hosts regrouped).
  std::unique_ptr<comm::Communicator> split(int color, int key) override;

  const Topology& topology() const { return topology_; }
  // The backend of the cross-host communicator ("gloo", "mpi").
  std::string cross_backend() const { return flat_->backend(); }

 private:
  class Guard;

  // One task at a time on a helper thread (the pipelined cross allreduce).
  class Helper {
   public:
    ~Helper();
    void start(std::function<void()> task);
    // Waits for the task; rethrows what it threw.
    void wait();

   private:
    void loop();
    std::mutex mutex_;
    std::condition_variable cv_;
    std::function<void()> task_;
    bool busy_ = false;
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
  };

  void allreduce_small(BufferView send, BufferView recv, ReduceOp op, bool average);
  void allreduce_slices(BufferView send, BufferView recv, size_t slice, ReduceOp op, bool average);
  // The slices path over several chunks of uniform hosts, pipelined.
  void allreduce_pipelined(BufferView send, BufferView recv, size_t chunk, ReduceOp op, bool average);
  void broadcast_small(BufferView buffer, int root_host, int root_local);
  void broadcast_slices(BufferView buffer, size_t slice, int root_host, int root_local);
  BufferView scratch(size_t count, DType dtype, int which = 0);
  // Elements per chunk of a large message: a multiple of the slice count.
  size_t chunk_elements(DType dtype) const;

  std::unique_ptr<comm::Communicator> flat_;
  std::shared_ptr<rendezvous::Store> store_;
  Options options_;
  int rank_ = 0;
  int size_ = 1;
  Topology topology_;
  int host_ = 0;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::unique_ptr<comm::Communicator> local_;
  std::unique_ptr<comm::Communicator> cross_;  // null on local ranks >= topology_.min_local
  std::vector<std::byte> scratch_[2];
  std::unique_ptr<Helper> helper_;  // started by the first pipelined allreduce
  int splits_ = 0;
  bool failed_ = false;
};

}  // namespace cohort::comm::hierarchical
