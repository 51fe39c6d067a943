#include "cohort/comm/mpi/communicator.h"

#include "cohort/comm/buffer_util.h"
#include "cohort/comm/f32_average.h"
#include "cohort/comm/messages.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include "cohort/comm/mpi/datatypes.h"
#include "cohort/comm/mpi/runtime.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/reduce.h"
#include "cohort/common/tunables.h"

namespace cohort::comm::mpi {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind : uint8_t {
  allreduce = 1, broadcast, allgather, allgatherv, reduce_scatter, alltoall, alltoallv,
  gather, scatter, barrier, split, send, recv
};
constexpr const char* kKindNames[] = {"?",       "allreduce", "broadcast", "allgather", "allgatherv",
                                      "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter",
                                      "barrier", "split",     "send",      "recv"};
constexpr uint8_t kNoOp = 0xff;

// Tags: point-to-point messages on the data communicator, aborts on the
// control one.
constexpr int kPointToPointTag = 7001;
constexpr int kAbortTag = 7002;
constexpr size_t kAbortBytes = 2048;

// Messages larger than this go out in pieces (MPI counts are int).
constexpr size_t kMaxPiece = size_t(1) << 30;

struct MessageHeader {
  uint32_t magic;
  uint32_t tag;
  uint32_t dtype;
  uint32_t eager;  // 1: the payload follows in the same message
  uint64_t count;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 32);
constexpr uint32_t kHeaderMagic = 0x43503250;  // "CP2P"

enum class AbortKind : char { mismatch = 'M', timeout = 'T', left = 'L', error = 'E' };

uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// An MPI count: MPI takes int.
int count_of(size_t n, const char* what) {
  COHORT_CHECK(n <= size_t(INT_MAX)) << what << ": " << n
                                     << " elements exceed MPI's int counts (2^31-1); split the call";
  return static_cast<int>(n);
}

// One call's identity: what the ranks must agree on, and how to name it.
struct Call {
  Kind kind;
  DType dtype = DType::u8;
  uint64_t count = 0;
  uint8_t op = kNoOp;
  int root = -1;  // or the peer of send/recv
  uint64_t extra = 0;
  uint32_t tag = 0;
  uint64_t sequence = 0;

  uint64_t signature() const {
    uint64_t h = mix(sequence, uint64_t(kind));
    h = mix(h, uint64_t(dtype));
    h = mix(h, count);
    h = mix(h, op);
    h = mix(h, uint64_t(int64_t(root)));
    return mix(h, extra);
  }
  std::string describe() const {
    std::ostringstream os;
    os << kKindNames[int(kind)] << '(';
    if (kind != Kind::split && kind != Kind::barrier) os << count << ' ' << dtype_name(dtype);
    if (op != kNoOp) os << ", " << reduce_op_name(static_cast<ReduceOp>(op));
    if (kind == Kind::send || kind == Kind::recv)
      os << ", tag " << tag << (kind == Kind::send ? ", to " : ", from ") << "rank " << root;
    else if (root >= 0)
      os << ", root " << root;
    os << ')';
    if (kind != Kind::send && kind != Kind::recv) os << " as collective #" << sequence;
    return os.str();
  }
};

// Abort records stay alive for the whole process: MPI may read them after
// the failing communicator is gone (their requests are freed unfinished).
std::mutex g_abort_mutex;
std::deque<std::string> g_abort_records;

}  // namespace

Options options_from_env() {
  Options o;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(tunables::timeout_s() * 1000));
  o.verify = tunables::mpi_verify();
  return o;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* s = std::getenv(v); s && *s) return true;
  const char* procid = std::getenv("SLURM_PROCID");
  const char* ntasks = std::getenv("SLURM_NTASKS");
  return procid && *procid && ntasks && *ntasks;
}

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // the data
  MPI_Comm ctrl = MPI_COMM_NULL;  // aborts
  int rank = 0;
  int size = 1;
  Options options;
  bool failed = false;
  uint64_t calls = 0;
  int spin_limit = 2000;  // MPI_Test rounds before yielding the core
  std::array<char, kAbortBytes> abort_in{};
  MPI_Request abort_request = MPI_REQUEST_NULL;
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<std::deque<Outgoing>> outgoing;
  std::vector<Outgoing> spare;
  std::vector<char> header_in;

  // Takes ownership of `data` (a communicator of its own).
  Impl(MPI_Comm data, Options o) : comm(data), options(std::move(o)) {
    auto lock = call_lock();
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    check(MPI_Comm_dup(comm, &ctrl), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(ctrl, MPI_ERRORS_RETURN);
    check(MPI_Irecv(abort_in.data(), int(abort_in.size()), MPI_CHAR, MPI_ANY_SOURCE, kAbortTag, ctrl, &abort_request),
          "MPI_Irecv");
    lock = {};
    if (options.world_ranks.empty()) {
      options.world_ranks.resize(size);
      std::iota(options.world_ranks.begin(), options.world_ranks.end(), 0);
    }
    COHORT_CHECK_EQ(options.world_ranks.size(), size_t(size));
    outgoing.resize(size);
    header_in.resize(sizeof(MessageHeader) + options.eager_bytes);
  }

  ~Impl() {
    if (finalized()) return;
    auto lock = call_lock();
    if (abort_request != MPI_REQUEST_NULL) {
      MPI_Cancel(&abort_request);
      MPI_Wait(&abort_request, MPI_STATUS_IGNORE);
    }
    // After a failure, collectives may still be pending on `comm`: leave it
    // to MPI_Finalize rather than free it under them.
    if (!failed) {
      MPI_Comm_free(&ctrl);
      MPI_Comm_free(&comm);
    }
  }

  std::string describe_rank(int r) const { return "rank " + std::to_string(options.world_ranks[r]); }

  // An MPI error code as a cohort error; the peers are told (they would
  // otherwise wait for this rank until their timeout).
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) [[likely]]
      return;
    failed = true;
    const std::string message = std::string(what) + " failed on " + describe_rank(rank) + ": " + error_text(rc);
    if (ctrl != MPI_COMM_NULL) broadcast_abort(AbortKind::error, message);
    if (is_process_failure(rc)) throw PeerLostError(message, -1);
    throw Error(message);
  }

  // Tells every peer why this rank fails, so that they stop waiting for it.
  void broadcast_abort(AbortKind kind, const std::string& message) noexcept {
    std::string record(1, char(kind));
    record += message.substr(0, kAbortBytes - 1);
    std::lock_guard records(g_abort_mutex);
    const std::string& kept = g_abort_records.emplace_back(std::move(record));
    auto lock = call_lock();
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      MPI_Request r;
      if (MPI_Isend(kept.data(), int(kept.size()), MPI_CHAR, p, kAbortTag, ctrl, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);
    }
  }

  [[noreturn]] void fail(AbortKind kind, const std::string& message) {
    failed = true;
    broadcast_abort(kind, message);
    switch (kind) {
      case AbortKind::mismatch: throw MismatchError(message);
      case AbortKind::timeout: throw TimeoutError(message);
      case AbortKind::left: throw PeerLostError(message, options.world_ranks[rank]);
      case AbortKind::error: break;
    }
    throw Error(message);
  }

  void poll_abort() {
    int arrived = 0;
    MPI_Status status;
    {
      auto lock = call_lock();
      check(MPI_Test(&abort_request, &arrived, &status), "MPI_Test");
    }
    if (!arrived) return;
    failed = true;
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    const std::string record(abort_in.data(), size_t(std::max(length, 1)));
    const int from = options.world_ranks[status.MPI_SOURCE];
    const std::string message = "rank " + std::to_string(from) + " failed: " + record.substr(1);
    switch (static_cast<AbortKind>(record[0])) {
      case AbortKind::mismatch: throw MismatchError(message);
      case AbortKind::timeout: throw TimeoutError(message);
      case AbortKind::left: throw PeerLostError(record.substr(1), from, "", record.substr(1));
      default: throw Error(message);
    }
  }

  // Spins on `test` (an MPI_Test-like call, which also drives MPI's
  // progress; returns its error code and sets `done`), yielding the core
  // after a while, until done, the timeout, or a peer's abort.
  template <typename Test>
  void wait_until(const Call& call, Test&& test) {
    const auto deadline = Clock::now() + options.timeout;
    for (int round = 0;; ++round) {
      int done = 0;
      int rc;
      {
        auto lock = call_lock();
        rc = test(&done);
      }
      check(rc, kKindNames[int(call.kind)]);
      if (done) return;
      if ((round & 63) == 63) {
        poll_abort();
        if (Clock::now() > deadline)
          fail(AbortKind::timeout, call.describe() + " timed out after " + seconds_text(options.timeout) + " on " +
                                       describe_rank(rank) + " (MPI cannot tell which ranks are missing)");
      }
      if (round > spin_limit) sched_yield();
    }
  }
  void wait(MPI_Request& request, const Call& call) {
    wait_until(call, [&](int* done) { return MPI_Test(&request, done, MPI_STATUS_IGNORE); });
  }

  // Starts a collective: numbers it and, with verify, makes the ranks agree
  // on it before any data moves.
  void begin(Call& call) {
    COHORT_CHECK(!failed) << "the communicator failed earlier; create a new one";
    poll_abort();
    call.sequence = calls++;
    if (!options.verify || size == 1) return;
    const uint64_t sig = call.signature();
    uint64_t agreed[2] = {sig, ~sig};
    MPI_Request r;
    {
      auto lock = call_lock();
      check(MPI_Iallreduce(MPI_IN_PLACE, agreed, 2, MPI_UINT64_T, MPI_MIN, comm, &r), "MPI_Iallreduce");
    }
    wait(r, call);
    if (agreed[0] == sig && ~agreed[1] == sig) return;
    // Every rank got the same verdict, so every rank takes this path: gather
    // the calls to name them.
    constexpr size_t kWidth = 160;
    std::array<char, kWidth> mine{};
    const std::string text = call.describe();
    std::memcpy(mine.data(), text.data(), std::min(text.size(), kWidth - 1));
    std::vector<char> all(kWidth * size_t(size));
    {
      auto lock = call_lock();
      check(MPI_Iallgather(mine.data(), int(kWidth), MPI_CHAR, all.data(), int(kWidth), MPI_CHAR, comm, &r),
            "MPI_Iallgather");
    }
    wait(r, call);
    std::map<std::string, std::string> ranks_by_call;
    for (int p = 0; p < size; ++p) {
      std::string& list = ranks_by_call[std::string(all.data() + kWidth * p)];
      list += (list.empty() ? "" : ", ") + std::to_string(options.world_ranks[p]);
    }
    std::string message = "ranks disagree on the collective:";
    for (const auto& [c, ranks] : ranks_by_call) message += " ranks " + ranks + " called " + c + ";";
    message.pop_back();
    failed = true;
    throw MismatchError(message);
  }

  // Runs a nonblocking MPI operation started by `start` (which returns its
  // error code and fills the request) to completion.
  template <typename Start>
  void run(const Call& call, const char* name, Start&& start) {
    MPI_Request r = MPI_REQUEST_NULL;
    {
      auto lock = call_lock();
      check(start(&r), name);
    }
    wait(r, call);
  }

  void reap(int peer, size_t keep) {
    auto& queue = outgoing[peer];
    while (queue.size() > keep) {
      wait(queue.front().request, Call{Kind::send, DType::u8, 0, kNoOp, peer});
      spare.push_back(std::move(queue.front()));
      queue.pop_front();
    }
  }
};

Communicator::Communicator(Options options) {
  ensure_initialized();
  MPI_Comm world;
  {
    auto lock = call_lock();
    const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    COHORT_CHECK(rc == MPI_SUCCESS) << "MPI_Comm_dup(MPI_COMM_WORLD): " << error_text(rc);
  }
  impl_ = std::make_unique<Impl>(world, std::move(options));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (!impl_ || finalized()) return;
  try {
    if (!impl_->failed && std::uncaught_exceptions() > 0) {
      impl_->failed = true;
      impl_->broadcast_abort(AbortKind::left, impl_->describe_rank(impl_->rank) +
                                                  " left the communicator on an exception");
    } else if (!impl_->failed) {
      // Buffered sends must reach their receivers before the handles go.
      for (int p = 0; p < impl_->size; ++p) impl_->reap(p, 0);
    }
  } catch (const std::exception& e) {
    COHORT_LOG(warn) << "mpi communicator of " << impl_->describe_rank(impl_->rank) << " closing: " << e.what();
  }
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }

// ---------------------------------------------------------------------------
// Collectives

void Communicator::allreduce(BufferView send, BufferView recv, const AllreduceOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count) << "allreduce send and recv counts differ";
  COHORT_CHECK(send.dtype == recv.dtype) << "allreduce send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "allreduce");
  if (average_needs_f32(send.dtype, options.op)) return allreduce_average_in_f32(*this, send, recv);
  Call call{Kind::allreduce, send.dtype, send.count, uint8_t(options.op)};
  impl_->begin(call);
  const MPI_Datatype type = datatype_of(send.dtype);
  const MPI_Op op = operation_of(send.dtype, options.op);
  const size_t piece = kMaxPiece / dtype_size(send.dtype);
  for (size_t off = 0; off < send.count; off += piece) {
    const int n = int(std::min(piece, send.count - off));
    const void* in = send.data == recv.data ? MPI_IN_PLACE : at(send, off);
    impl_->run(call, "MPI_Iallreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(in, at(recv, off), n, type, op, impl_->comm, r);
    });
  }
  if (options.op == ReduceOp::avg) finish_average(recv.dtype, recv.data, recv.count, impl_->size);
}

void Communicator::broadcast(BufferView buffer, int root) {
  COHORT_CHECK(root >= 0 && root < size()) << "broadcast root " << root << " outside [0, " << size() << ")";
  Call call{Kind::broadcast, buffer.dtype, buffer.count, kNoOp, root};
  impl_->begin(call);
  const size_t piece = kMaxPiece / dtype_size(buffer.dtype);
  for (size_t off = 0; off < buffer.count; off += piece) {
    const int n = int(std::min(piece, buffer.count - off));
    impl_->run(call, "MPI_Ibcast", [&](MPI_Request* r) {
      return MPI_Ibcast(at(buffer, off), n, datatype_of(buffer.dtype), root, impl_->comm, r);
    });
  }
}

void Communicator::allgather(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(recv.count, send.count * size()) << "allgather recv must hold size() sends";
  COHORT_CHECK(send.dtype == recv.dtype) << "allgather send and recv dtypes differ";
  const bool in_place = send.data == at(recv, send.count * rank());
  if (!in_place) check_no_partial_overlap(send, recv, "allgather");
  Call call{Kind::allgather, send.dtype, send.count};
  impl_->begin(call);
  if (send.count == 0) return;
  const int n = count_of(send.count, "allgather");
  const MPI_Datatype type = datatype_of(send.dtype);
  impl_->run(call, "MPI_Iallgather", [&](MPI_Request* r) {
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : send.data, n, type, recv.data, n, type, impl_->comm, r);
  });
}

void Communicator::allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) {
  COHORT_CHECK_EQ(counts.size(), size_t(size())) << "allgatherv needs one count per rank";
  COHORT_CHECK_EQ(send.count, counts[rank()]) << "allgatherv send count differs from counts[rank]";
  COHORT_CHECK(send.dtype == recv.dtype) << "allgatherv send and recv dtypes differ";
  const auto displ = displacements(counts);
  COHORT_CHECK_EQ(recv.count, displ.back()) << "allgatherv recv must hold the sum of counts";
  const bool in_place = send.data == at(recv, displ[rank()]);
  if (!in_place) check_no_partial_overlap(send, recv, "allgatherv");
  uint64_t counts_hash = 0;
  for (size_t c : counts) counts_hash = mix(counts_hash, c);
  Call call{Kind::allgatherv, send.dtype, displ.back(), kNoOp, -1, counts_hash};
  impl_->begin(call);
  if (displ.back() == 0) return;
  std::vector<int> n(size()), d(size());
  for (int p = 0; p < size(); ++p) {
    n[p] = count_of(counts[p], "allgatherv count");
    d[p] = count_of(displ[p], "allgatherv displacement");
  }
  const MPI_Datatype type = datatype_of(send.dtype);
  impl_->run(call, "MPI_Iallgatherv", [&](MPI_Request* r) {
    return MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send.data, n[rank()], type, recv.data, n.data(), d.data(),
                           type, impl_->comm, r);
  });
}

void Communicator::reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count * size()) << "reduce_scatter send must hold size() recv blocks";
  COHORT_CHECK(send.dtype == recv.dtype) << "reduce_scatter send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "reduce_scatter");
  if (average_needs_f32(recv.dtype, options.op)) return reduce_scatter_average_in_f32(*this, send, recv);
  Call call{Kind::reduce_scatter, recv.dtype, recv.count, uint8_t(options.op)};
  impl_->begin(call);
  if (recv.count == 0) return;
  const int n = count_of(recv.count, "reduce_scatter block");
  const MPI_Datatype type = datatype_of(recv.dtype);
  const MPI_Op op = operation_of(recv.dtype, options.op);
  // In place, recv is the start of send, which is where MPI_IN_PLACE leaves
  // each rank's block.
  const bool in_place = send.data == recv.data;
  impl_->run(call, "MPI_Ireduce_scatter_block", [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send.data, recv.data, n, type, op, impl_->comm, r);
  });
  if (options.op == ReduceOp::avg) finish_average(recv.dtype, recv.data, recv.count, size());
}

void Communicator::alltoall(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(send.count, recv.count) << "alltoall send and recv counts differ";
  COHORT_CHECK_EQ(send.count % size(), size_t(0)) << "alltoall count must divide by size()";
  COHORT_CHECK(send.dtype == recv.dtype) << "alltoall send and recv dtypes differ";
  COHORT_CHECK(send.data != recv.data || size() == 1 || send.count == 0) << "alltoall cannot run in place";
  check_no_partial_overlap(send, recv, "alltoall");
  Call call{Kind::alltoall, send.dtype, send.count};
  impl_->begin(call);
  if (send.count == 0) return;
  if (send.data == recv.data) return;  // one rank, in place
  const int n = count_of(send.count / size(), "alltoall block");
  const MPI_Datatype type = datatype_of(send.dtype);
  impl_->run(call, "MPI_Ialltoall", [&](MPI_Request* r) {
    return MPI_Ialltoall(send.data, n, type, recv.data, n, type, impl_->comm, r);
  });
}

void Communicator::alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                             std::span<const size_t> recv_counts) {
  COHORT_CHECK_EQ(send_counts.size(), size_t(size())) << "alltoallv needs one send count per rank";
  COHORT_CHECK_EQ(recv_counts.size(), size_t(size())) << "alltoallv needs one recv count per rank";
  COHORT_CHECK(send.dtype == recv.dtype) << "alltoallv send and recv dtypes differ";
  const auto sdispl = displacements(send_counts);
  const auto rdispl = displacements(recv_counts);
  COHORT_CHECK_LE(sdispl.back(), send.count) << "alltoallv send counts exceed the send buffer";
  COHORT_CHECK_LE(rdispl.back(), recv.count) << "alltoallv recv counts exceed the recv buffer";
  COHORT_CHECK_EQ(send_counts[rank()], recv_counts[rank()]) << "alltoallv: this rank's block to itself";
  COHORT_CHECK(send.data != recv.data || size() == 1) << "alltoallv cannot run in place";
  Call call{Kind::alltoallv, send.dtype, 0};
  impl_->begin(call);
  const int p_count = size();
  std::vector<int> sn(p_count), sd(p_count), rn(p_count), rd(p_count);
  for (int p = 0; p < p_count; ++p) {
    sn[p] = count_of(send_counts[p], "alltoallv count");
    sd[p] = count_of(sdispl[p], "alltoallv displacement");
    rn[p] = count_of(recv_counts[p], "alltoallv count");
    rd[p] = count_of(rdispl[p], "alltoallv displacement");
  }
  if (impl_->options.verify && p_count > 1) {
    // Each block's length must be what its receiver expects, or MPI
    // truncates (or worse); compare before moving data.
    std::vector<int> announced(p_count);
    impl_->run(call, "MPI_Ialltoall", [&](MPI_Request* r) {
      return MPI_Ialltoall(sn.data(), 1, MPI_INT, announced.data(), 1, MPI_INT, impl_->comm, r);
    });
    int mismatched = 0;
    std::string detail;
    for (int p = 0; p < p_count; ++p)
      if (announced[p] != rn[p]) {
        ++mismatched;
        detail = impl_->describe_rank(p) + " sends " + std::to_string(announced[p]) + " elements to " +
                 impl_->describe_rank(rank()) + ", which expects " + std::to_string(rn[p]);
      }
    // Everyone must learn that someone disagrees, or the others would run
    // the exchange alone.
    int any = mismatched;
    impl_->run(call, "MPI_Iallreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, impl_->comm, r);
    });
    if (any) {
      impl_->failed = true;
      throw MismatchError("alltoallv mismatch: " +
                          (mismatched ? detail : "block lengths disagree between other ranks (see their errors)"));
    }
  }
  if (p_count == 1) {
    if (send_counts[0]) std::memmove(recv.data, send.data, send_counts[0] * dtype_size(send.dtype));
    return;
  }
  const MPI_Datatype type = datatype_of(send.dtype);
  impl_->run(call, "MPI_Ialltoallv", [&](MPI_Request* r) {
    return MPI_Ialltoallv(send.data, sn.data(), sd.data(), type, recv.data, rn.data(), rd.data(), type,
                          impl_->comm, r);
  });
}

void Communicator::gather(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size()) << "gather root " << root << " outside [0, " << size() << ")";
  const bool is_root = rank() == root;
  if (is_root) {
    COHORT_CHECK_EQ(recv.count, send.count * size()) << "gather recv must hold size() sends on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "gather send and recv dtypes differ";
  }
  Call call{Kind::gather, send.dtype, send.count, kNoOp, root};
  impl_->begin(call);
  if (send.count == 0) return;
  const int n = count_of(send.count, "gather");
  const MPI_Datatype type = datatype_of(send.dtype);
  const bool in_place = is_root && send.data == at(recv, send.count * root);
  impl_->run(call, "MPI_Igather", [&](MPI_Request* r) {
    return MPI_Igather(in_place ? MPI_IN_PLACE : send.data, n, type, is_root ? recv.data : nullptr, n, type, root,
                       impl_->comm, r);
  });
}

void Communicator::scatter(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size()) << "scatter root " << root << " outside [0, " << size() << ")";
  const bool is_root = rank() == root;
  if (is_root) {
    COHORT_CHECK_EQ(send.count, recv.count * size()) << "scatter send must hold size() blocks on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "scatter send and recv dtypes differ";
  }
  Call call{Kind::scatter, recv.dtype, recv.count, kNoOp, root};
  impl_->begin(call);
  if (recv.count == 0) return;
  const int n = count_of(recv.count, "scatter");
  const MPI_Datatype type = datatype_of(recv.dtype);
  const bool in_place = is_root && recv.data == at(send, recv.count * root);
  impl_->run(call, "MPI_Iscatter", [&](MPI_Request* r) {
    return MPI_Iscatter(is_root ? send.data : nullptr, n, type, in_place ? MPI_IN_PLACE : recv.data, n, type, root,
                        impl_->comm, r);
  });
}

void Communicator::barrier() {
  Call call{Kind::barrier};
  impl_->begin(call);
  if (size() == 1) return;
  impl_->run(call, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(impl_->comm, r); });
}

// ---------------------------------------------------------------------------
// Point to point

void Communicator::send(BufferView buffer, int dst, uint32_t tag) {
  Impl& m = *impl_;
  COHORT_CHECK(dst >= 0 && dst < m.size && dst != m.rank) << "send to rank " << dst << " from rank " << m.rank;
  COHORT_CHECK(!m.failed) << "the communicator failed earlier; create a new one";
  m.poll_abort();
  Call call{Kind::send, buffer.dtype, buffer.count, kNoOp, dst, 0, tag};
  // Keep at most eager_window messages in flight to one peer.
  m.reap(dst, size_t(std::max(1, m.options.eager_window)) - 1);
  Impl::Outgoing out;
  if (!m.spare.empty()) {
    out = std::move(m.spare.back());
    m.spare.pop_back();
  } else {
    out.bytes.resize(sizeof(MessageHeader) + m.options.eager_bytes);
  }
  const size_t bytes = buffer.bytes();
  const bool eager = bytes <= m.options.eager_bytes;
  const MessageHeader header{kHeaderMagic, tag, uint32_t(buffer.dtype), eager ? 1u : 0u, buffer.count, bytes};
  std::memcpy(out.bytes.data(), &header, sizeof header);
  if (eager && bytes) std::memcpy(out.bytes.data() + sizeof header, buffer.data, bytes);
  {
    auto lock = call_lock();
    m.check(MPI_Isend(out.bytes.data(), int(sizeof header + (eager ? bytes : 0)), MPI_BYTE, dst, kPointToPointTag,
                      m.comm, &out.request),
            "MPI_Isend");
  }
  m.outgoing[dst].push_back(std::move(out));
  // The payload follows the header on the same tag (MPI keeps the order);
  // the caller may reuse its buffer once it is out.
  for (size_t off = 0; !eager && off < bytes; off += kMaxPiece) {
    const int n = int(std::min(kMaxPiece, bytes - off));
    m.run(call, "MPI_Isend", [&](MPI_Request* r) {
      return MPI_Isend(buffer.byte_data() + off, n, MPI_BYTE, dst, kPointToPointTag, m.comm, r);
    });
  }
}

void Communicator::recv(BufferView buffer, int src, uint32_t tag) {
  Impl& m = *impl_;
  COHORT_CHECK(src >= 0 && src < m.size && src != m.rank) << "recv from rank " << src << " on rank " << m.rank;
  COHORT_CHECK(!m.failed) << "the communicator failed earlier; create a new one";
  m.poll_abort();
  Call call{Kind::recv, buffer.dtype, buffer.count, kNoOp, src, 0, tag};
  // Probe first and receive exactly what came: a message longer than the
  // posted buffer is an error in MPI, and some transports write past the
  // buffer before reporting it.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  m.wait_until(call, [&](int* found) { return MPI_Improbe(src, kPointToPointTag, m.comm, found, &message, &status); });
  int length = 0;
  MPI_Get_count(&status, MPI_BYTE, &length);
  if (size_t(length) > m.header_in.size()) m.header_in.resize(size_t(length));
  m.run(call, "MPI_Imrecv", [&](MPI_Request* r) { return MPI_Imrecv(m.header_in.data(), length, MPI_BYTE, &message, r); });
  MessageHeader h{};
  if (size_t(length) >= sizeof h) std::memcpy(&h, m.header_in.data(), sizeof h);
  std::memcpy(&h, m.header_in.data(), sizeof h);
  if (h.magic != kHeaderMagic || h.tag != tag || h.dtype != uint32_t(buffer.dtype) || h.count != buffer.count) {
    std::ostringstream os;
    os << "point-to-point mismatch: " << m.describe_rank(m.rank) << " expected tag " << tag << ", " << buffer.count
       << ' ' << dtype_name(buffer.dtype) << " from " << m.describe_rank(src) << ", which sent tag " << h.tag << ", "
       << h.count << ' ' << (h.dtype <= uint32_t(DType::i64) ? dtype_name(DType(h.dtype)) : "?");
    m.fail(AbortKind::mismatch, os.str());
  }
  if (h.eager) {
    if (h.bytes) std::memcpy(buffer.data, m.header_in.data() + sizeof h, h.bytes);
    return;
  }
  for (size_t off = 0; off < h.bytes; off += kMaxPiece) {
    const int n = int(std::min<size_t>(kMaxPiece, h.bytes - off));
    m.run(call, "MPI_Irecv", [&](MPI_Request* r) {
      return MPI_Irecv(buffer.byte_data() + off, n, MPI_BYTE, src, kPointToPointTag, m.comm, r);
    });
  }
}

// ---------------------------------------------------------------------------
// Sub-groups

std::unique_ptr<comm::Communicator> Communicator::split(int color, int key) {
  Impl& m = *impl_;
  // The signature cannot include color and key (they differ by design).
  Call call{Kind::split};
  m.begin(call);
  MPI_Comm sub = MPI_COMM_NULL;
  {
    // MPI_Comm_split has no nonblocking form; the agreement above (and the
    // collectives before) make a hang here unlikely.
    auto lock = call_lock();
    m.check(MPI_Comm_split(m.comm, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
  }
  if (sub == MPI_COMM_NULL) return nullptr;
  Options options = m.options;
  int sub_size = 0;
  MPI_Comm_size(sub, &sub_size);
  options.world_ranks.assign(size_t(sub_size), 0);
  const int mine = m.options.world_ranks[m.rank];
  MPI_Request r;
  {
    auto lock = call_lock();
    m.check(MPI_Iallgather(&mine, 1, MPI_INT, options.world_ranks.data(), 1, MPI_INT, sub, &r), "MPI_Iallgather");
  }
  m.wait(r, call);
  return std::unique_ptr<comm::Communicator>(new Communicator(std::make_unique<Impl>(sub, std::move(options))));
}

}  // namespace cohort::comm::mpi
