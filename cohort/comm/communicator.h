// Communicator: one group of ranks and the collectives among them.
//
// Contract shared by every backend (shm, gloo, mpi, hierarchical):
// - Calls are synchronous and made from one thread per communicator (the
//   engine's); every rank of the group makes the same collective calls in the
//   same order with matching counts and dtypes.
// - Out of place when `send.data != recv.data`, in place when they are equal;
//   partially overlapping buffers are an error.
// - Sizes run from 0 elements up; a backend never needs memory proportional to
//   the message beyond the caller's buffers.
// - Failures throw: TimeoutError past the communicator's timeout,
//   PeerLostError naming a rank that died, MismatchError when ranks disagree
//   in a way the backend can see (tags, sizes), Error for invalid arguments.
//   After a failure the communicator is unusable; destroy it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cohort/common/buffer_view.h"
#include "cohort/common/reduce_op.h"

namespace cohort::comm {

struct AllreduceOptions {
  ReduceOp op = ReduceOp::sum;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shm", "gloo", ...
  virtual std::string backend() const = 0;

  // recv = op over all ranks' send; send.count == recv.count.
  virtual void allreduce(BufferView send, BufferView recv, const AllreduceOptions& options = {}) = 0;
  void allreduce(BufferView inout, const AllreduceOptions& options = {}) { allreduce(inout, inout, options); }

  // Every rank's `buffer` becomes root's.
  virtual void broadcast(BufferView buffer, int root) = 0;

  // recv = concat over ranks of send; recv.count == size() * send.count.
  virtual void allgather(BufferView send, BufferView recv) = 0;

  // recv = concat over ranks r of send_r, where send_r.count == counts[r] and
  // recv.count == sum(counts). Every rank passes the same `counts`.
  virtual void allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) = 0;

  // Block r (recv.count elements) of the reduction of all sends lands on rank
  // r; send.count == size() * recv.count.
  virtual void reduce_scatter(BufferView send, BufferView recv,
                              const ReduceScatterOptions& options = {}) = 0;

  // Block p of this rank's send goes to rank p, landing as block r (this
  // rank) of p's recv; send.count == recv.count == size() * block.
  virtual void alltoall(BufferView send, BufferView recv) = 0;

  // Variable blocks: send_counts[p] elements go to rank p, recv_counts[p]
  // elements come from rank p, packed in rank order in both buffers.
  virtual void alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                         std::span<const size_t> recv_counts) = 0;

  // Root's recv = concat over ranks of send (recv is ignored elsewhere).
  virtual void gather(BufferView send, BufferView recv, int root) = 0;

  // Block r of root's send lands in rank r's recv (send ignored elsewhere).
  virtual void scatter(BufferView send, BufferView recv, int root) = 0;

  virtual void barrier() = 0;

  // Point to point. Messages between an ordered pair of ranks are matched in
  // the order they are sent; the receiver's tag, count and dtype must equal
  // the sender's or both raise MismatchError. send returns once the data is
  // out of `buffer`, which for a large message means once the receiver has
  // taken most of it, so two ranks must not both send large messages to each
  // other before receiving.
  virtual void send(BufferView buffer, int dst, uint32_t tag) = 0;
  virtual void recv(BufferView buffer, int src, uint32_t tag) = 0;

  // A communicator over the ranks that passed the same `color`, ordered by
  // (key, rank in this communicator). Collective over this communicator.
  // A negative color takes part in the split but gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

}  // namespace cohort::comm
