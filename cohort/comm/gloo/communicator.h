// The gloo communicator: ranks on any hosts, over Gloo's TCP transport
// (Debian's libgloo-dev), rendezvous through a cohort Store.
//
// Construction is collective: every rank publishes the addresses of its
// connections under the store it was given (keys "<rank>", see
// store_adapter.h; give each communicator a fresh namespace) and connects a
// full mesh. The network interface comes from Options::iface, else
// Options::hostname, else net::listen_choice's fallback: the default route's
// interface, else the first other interface with an IPv4 address, else this
// host's name (common/network_interface.h). split() shares the parent's device (one event loop
// thread per process) with its own connections.
//
// The first communicator sets SIGPIPE to ignored when it has the default
// disposition: Gloo writes to sockets with writev(2), and a peer that is gone
// must be an error, not the end of this process.
//
// Operations:
// - allreduce: Gloo's bcube (log n steps, latency-bound sizes; it needs
//   scratch memory the size of the message) up to Options::bcube_max_bytes,
//   Gloo's pipelined ring above (two 1 MiB segments of scratch, one
//   connection busy per rank: the bandwidth-optimal choice across hosts).
//   Reductions run cohort's kernels (every DType and ReduceOp; avg is a sum
//   and then finish_average, and for f16/bf16 runs in f32: f32_average.h).
//   Every rank ends with the same bits.
// - reduce_scatter: a ring of our own over unbound buffers, in chunks of at
//   most Options::chunk_bytes so that memory stays bounded.
// - broadcast, allgather(v), alltoall(v), gather, scatter, barrier: Gloo's
//   algorithms.
// - send/recv: a 32-byte header (tag, dtype, count) travels before the data,
//   or with it up to Options::eager_bytes; messages up to that size are
//   buffered, so a sender may run Options::eager_window messages ahead of its
//   receiver per peer before send blocks.
//
// Agreement: every collective's Gloo tag is a hash of the call's sequence
// number and signature (kind, dtype, count, op, root), so ranks that disagree
// never exchange a byte: their messages wait in different slots instead of
// overrunning buffers. They then time out, and the failure report below turns
// the timeout into a MismatchError naming both calls.
//
// Failures: a timeout (no progress for Options::timeout), a lost connection
// or a disagreement makes the failing rank write a report under its store
// ("failure/<rank>") and read the reports of the ranks involved for up to
// Options::failure_grace, so that every rank raises the error that explains
// the failure: MismatchError naming both calls (two ranks in different calls
// as the same collective; ranks in successive collectives are only the trace
// of a rank lost mid-collective), TimeoutError naming the rank that timed
// out and the ranks that reported no failure (those it waited for: a hung
// rank, a cut link), PeerLostError naming the rank whose connection broke
// (with its last words when it reported any). A rank whose communicator is
// destroyed by an exception reports that it left. After a failure the
// communicator is unusable.
//
// Abandoning (elastic worlds): a member behind a cut link or on a hung host
// never closes its connections, and its peers would wait for it until the
// timeout. abort() fails every collective in progress, and every later one,
// with PeerLostError at once (it shuts this rank's connections down:
// connection_shutdown.h); Options::abandoned, polled by a thread of the
// communicator, calls it when the launcher says the world lost a member.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/rendezvous/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace cohort::comm::gloo {

class FailureReport;
struct FailureRecord;

struct Options {
  std::chrono::milliseconds timeout{300000};
  // The network interface to bind (e.g. "eth0", "lo"); COHORT_IFACE.
  std::string iface;
  // Used when iface is empty: a host name or address of this host to bind.
  // Both empty: net::listen_choice's fallback (common/network_interface.h):
  // primary_interface(), else the host name's address.
  std::string hostname;
  size_t bcube_max_bytes = 1 << 20;    // allreduce algorithm switch (bcube's scratch is the message)
  size_t chunk_bytes = 1 << 20;        // reduce_scatter pipeline chunk
  size_t eager_bytes = 16 * 1024;      // p2p payloads sent with their header (the ranks' smallest wins)
  int eager_window = 4;                // buffered sends per peer
  // How long a failing rank waits for its peers' failure reports.
  std::chrono::milliseconds failure_grace{1000};
  // World rank of each member, for messages; empty means identity.
  std::vector<int> world_ranks;
  // Set for elastic worlds: polled every abandon_poll once the communicator
  // is connected; a reason returned (a member of this world was lost) aborts
  // it (abort()). It must not block for long: a store read.
  std::function<std::optional<std::string>()> abandoned;
  std::chrono::milliseconds abandon_poll{100};
};

// The options from the COHORT_* tunables (COHORT_TIMEOUT_S, COHORT_IFACE,
// COHORT_GLOO_BCUBE_BYTES).
Options options_from_env();

class Communicator final : public comm::Communicator {
 public:
  // Collective over the `size` ranks that pass the same `store` namespace.
  Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options);
  ~Communicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

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

  // The address this rank's device is bound to, e.g. "[127.0.0.1]" (tests,
  // logs).
  std::string device_address() const;

  // From any thread: the call in progress, or else the next one, fails with
  // PeerLostError naming `why` (the communicator is then failed, as after
  // any failure); this rank's connections are shut down, so that peers in a
  // call with it fail too. The first reason given wins.
  void abort(const std::string& why);

 private:
  struct Call;
  struct Outgoing;

  Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options,
               std::shared_ptr<::gloo::transport::Device> device);

  // Starts a collective: numbers it and returns the tag of its slots.
  uint32_t begin(Call& call);
  // Runs `body`, turning Gloo's exceptions into cohort's (see the file
  // comment); `body` may also throw cohort errors.
  template <typename Body>
  void guarded(const Call& call, Body&& body);
  [[noreturn]] void fail_from_gloo(const Call& call, const std::string& what, bool timed_out);
  [[noreturn]] void fail_mismatch(const Call& call, const std::string& message);
  std::string describe_rank(int r) const;
  std::vector<int> broken_peers();

  void reduce_scatter_ring(BufferView send, BufferView recv, ReduceOp op, uint32_t tag);
  void reap_outgoing(int peer, size_t keep);
  [[noreturn]] void fail_aborted(const std::string& where);
  // Each pair's listening endpoint, comma-separated by peer (abort()).
  static std::string pairs_key(int rank);
  std::string own_endpoints() const;
  void watch_abandoned();

  std::shared_ptr<rendezvous::Store> store_;
  int rank_;
  int size_;
  Options options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> context_;
  std::unique_ptr<FailureReport> report_;
  uint64_t calls_ = 0;  // collectives started, the sequence number in tags
  int splits_ = 0;
  bool failed_ = false;
  // Buffered point-to-point sends per destination, oldest first.
  std::vector<std::deque<std::unique_ptr<Outgoing>>> outgoing_;
  std::vector<std::unique_ptr<Outgoing>> spare_;  // completed, for reuse
  std::vector<char> header_in_;                   // receive staging
  std::unique_ptr<::gloo::transport::UnboundBuffer> header_in_buffer_;
  // abort(): the reason is written once, before `aborted_` is set.
  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::atomic<bool> aborted_{false};
  // The watcher of Options::abandoned; stopped first on destruction.
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::thread watcher_;
};

}  // namespace cohort::comm::gloo
