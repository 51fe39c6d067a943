#include "cohort/comm/shm/communicator.h"

#include "cohort/comm/buffer_util.h"

#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <sstream>

#include "cohort/comm/messages.h"
#include "cohort/comm/shm/test_hooks.h"
#include "cohort/common/check.h"
#include "cohort/common/copy.h"
#include "cohort/common/host_key.h"
#include "cohort/common/logging.h"
#include "cohort/common/reduce.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::comm::shm {
namespace {

enum class Kind : uint8_t {
  allreduce = 1, broadcast, allgather, allgatherv, reduce_scatter, alltoall, alltoallv,
  gather, scatter, barrier, setup
};

constexpr const char* kKindNames[] = {"?",       "allreduce", "broadcast",      "allgather",
                                      "allgatherv", "reduce_scatter", "alltoall", "alltoallv",
                                      "gather",  "scatter",   "barrier",        "setup"};

constexpr uint8_t kNoOp = 0xff;

// Allreduce results from this size on are written with streaming stores.
constexpr size_t kStreamingBytes = size_t(4) << 20;

Signature make_signature(Kind kind, DType dtype, uint64_t count, uint8_t op = kNoOp, int root = -1) {
  return {uint64_t(kind) | uint64_t(dtype) << 8 | uint64_t(op) << 16 | uint64_t(root + 1) << 24, count};
}

std::string describe_signature(const Signature& s) {
  const auto kind = static_cast<unsigned>(s.what & 0xff);
  const auto dtype = static_cast<DType>((s.what >> 8) & 0xff);
  const auto op = static_cast<uint8_t>((s.what >> 16) & 0xff);
  const int root = static_cast<int>((s.what >> 24) & 0xffff) - 1;
  std::ostringstream os;
  os << (kind < std::size(kKindNames) ? kKindNames[kind] : "?") << '(' << s.count << ' '
     << dtype_name(dtype);
  if (op != kNoOp) os << ", " << reduce_op_name(static_cast<ReduceOp>(op));
  if (root >= 0) os << ", root " << root;
  os << ')';
  return os.str();
}

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Elements per piece when a slot is cut into `parts` pieces: cache-line
// multiples so that ranks writing neighbouring pieces never share a line.
size_t piece_elements(size_t slot_bytes, int parts, size_t esize) {
  size_t bytes = slot_bytes / size_t(parts);
  if (bytes >= kCacheLine) bytes -= bytes % kCacheLine;
  return std::max<size_t>(1, bytes / esize);
}

void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) {
  if (dst != src && bytes) std::memmove(dst, src, bytes);
}

int online_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace

Options options_from_env() {
  Options o;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(tunables::timeout_s() * 1000));
  o.slot_bytes = static_cast<size_t>(tunables::shm_slot_bytes());
  o.small_bytes = static_cast<size_t>(tunables::shm_small_bytes());
  o.spin = std::chrono::microseconds(tunables::spin_us());
  o.probe_interval = std::chrono::milliseconds(tunables::peer_check_ms());
  if (const char* job = std::getenv("COHORT_JOB_ID"); job && *job) o.job_id = job;
  return o;
}

// Runs while a rank waits for `flag` to reach `target`: a published abort,
// a peer that died or left.
class Communicator::Probe final : public shm::Probe {
 public:
  Probe(Communicator& comm, int awaited, const Flag& flag, uint32_t target)
      : comm_(comm), awaited_(awaited), flag_(flag), target_(target) {}
  void operator()() override { comm_.probe(awaited_, flag_, target_); }

 private:
  Communicator& comm_;
  int awaited_;
  const Flag& flag_;
  uint32_t target_;
};

Communicator::Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, size >= 1) << "communicator size must be positive";
  COHORT_CHECK_AS(ConfigError, rank >= 0 && rank < size) << "rank " << rank << " outside [0, " << size << ")";
  COHORT_CHECK_AS(ConfigError, options_.slot_bytes >= 4096 && options_.slot_bytes <= (size_t(1) << 30))
      << "COHORT_SHM_SLOT_BYTES=" << options_.slot_bytes << " must lie in [4096, 1 GiB]";
  COHORT_CHECK(store_ != nullptr) << "shm communicator needs a store";
  if (options_.world_ranks.empty()) {
    options_.world_ranks.resize(size_);
    std::iota(options_.world_ranks.begin(), options_.world_ranks.end(), 0);
  }
  COHORT_CHECK_EQ(options_.world_ranks.size(), size_t(size_));
  host_ = net::host_label();  // as the user named it (cohortrun -H)

  auto spin = options_.spin;
  if (spin.count() < 0) spin = size_ <= online_cpus() ? std::chrono::microseconds(50) : std::chrono::microseconds(0);
  policy_ = WaitPolicy{spin, options_.probe_interval};

  const Geometry geometry = Geometry::for_group(size_, options_.slot_bytes);
  segment_ = Segment::rendezvous(*store_, rank_, geometry, options_.job_id, options_.timeout, options_.world_ranks);
  sent_.assign(size_, 0);
  taken_.assign(size_, 0);
  pidfds_.assign(size_, -1);
  srcs_.assign(size_, nullptr);

  // Every rank wrote its pid before announcing itself; one barrier step makes
  // all of them visible here.
  begin_collective("setup", make_signature(Kind::setup, DType::u8, 0));
  publish_step();
  wait_all_peers();
  for (int p = 0; p < size_; ++p) {
    const pid_t pid = segment_.control(p).pid;
    if (p == rank_ || pid == getpid() || pid <= 0) continue;
    pidfds_[p] = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfds_[p] < 0)
      COHORT_LOG(warn) << "cannot watch " << describe_rank(p) << ": pidfd_open: " << std::strerror(errno);
  }
}

Communicator::~Communicator() {
  // After the last published step (release): peers that see the departure
  // also see every step this rank published, so they blame it only for steps
  // it never published.
  if (segment_.geometry().size > 0)
    segment_.control(rank_).departed.store(
        uint32_t(std::uncaught_exceptions() > 0 ? Departure::on_exception : Departure::destroyed),
        std::memory_order_release);
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

// ---------------------------------------------------------------------------
// Step machinery

void Communicator::begin_collective(const char* name, Signature sig) {
  COHORT_CHECK(!failed_) << "the communicator failed earlier; create a new one";
  // No abort check here: a peer may finish a collective, leave on an
  // exception and record an abort before this rank has even started the same
  // collective, whose data is already complete. Refusing it would replace
  // this rank's own outcome with the peer's. A wait that is not satisfied
  // while spinning checks the abort record, so a collective that needs a
  // peer that failed still raises its error; a part that only writes (a
  // broadcast root) learns of it at the rank's next such wait.
  op_name_ = name;
  current_ = sig;
  deadline_ = Clock::now() + options_.timeout;
}

void Communicator::begin_write() {
  // Buffer (step_ & 1) was last written two steps ago; a peer that has
  // published step_ has finished reading it.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!await(p, segment_.control(p).step, step_))
      fail(AbortKind::timeout, describe_current() + " timed out after " + seconds_text(options_.timeout) + ": " +
                                   describe_rank(p) + " never finished the previous step");
  }
}

bool Communicator::await(int peer, const Flag& flag, uint32_t target) {
  Probe probe(*this, peer, flag, target);
  return wait_until(flag, target, policy_, deadline_, probe);
}

void Communicator::publish_step() {
  SignatureEntry& e = segment_.control(rank_).signatures[step_ % kSignatureEntries];
  e.step.store(~0u, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.what.store(current_.what, std::memory_order_relaxed);
  e.count.store(current_.count, std::memory_order_relaxed);
  e.step.store(step_, std::memory_order_release);
  ++step_;
  publish(segment_.control(rank_).step, step_);
}

void Communicator::wait_peer(int peer) {
  RankControl& c = segment_.control(peer);
  if (!await(peer, c.step, step_)) {
    std::string missing;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !reached(segment_.control(p).step.value.load(), step_))
        missing += (missing.empty() ? "" : ", ") + std::to_string(options_.world_ranks[p]);
    fail(AbortKind::timeout, describe_current() + " timed out after " + seconds_text(options_.timeout) + " on " +
                                 describe_rank(rank_) + " waiting for " + describe_rank(peer) +
                                 "; ranks that have not arrived: " + missing);
  }
  // The peer's signature for the step we just completed must be ours.
  const uint32_t step = step_ - 1;
  const SignatureEntry& e = c.signatures[step % kSignatureEntries];
  if (e.step.load(std::memory_order_acquire) != step) return;  // reused already: cannot tell
  const Signature theirs{e.what.load(std::memory_order_relaxed), e.count.load(std::memory_order_relaxed)};
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.step.load(std::memory_order_relaxed) != step) return;
  if (!(theirs == current_)) mismatch(peer, theirs);
}

void Communicator::wait_all_peers() {
  for (int p = 0; p < size_; ++p)
    if (p != rank_) wait_peer(p);
}

// ---------------------------------------------------------------------------
// Failures

std::string Communicator::describe_rank(int r) const {
  std::string s = "rank " + std::to_string(options_.world_ranks[r]);
  const pid_t pid = segment_.geometry().size > 0 ? segment_.control(r).pid : 0;
  if (pid > 0 && pid != getpid()) s += " (pid " + std::to_string(pid) + " on " + host_ + ")";
  return s;
}

std::string Communicator::describe_current() const {
  return describe_signature(current_) + " at step " + std::to_string(step_);
}

void Communicator::fail(AbortKind kind, const std::string& message, int culprit) {
  failed_ = true;
  AbortRecord& a = segment_.header().abort;
  uint32_t expected = 0;
  if (a.state.compare_exchange_strong(expected, abort_claimed_by(rank_), std::memory_order_acq_rel)) {
    if (test_hooks::after_abort_claim) test_hooks::after_abort_claim();
    a.kind = static_cast<int32_t>(kind);
    a.culprit = culprit;
    a.reporter = rank_;
    std::strncpy(a.message, message.c_str(), sizeof a.message - 1);
    a.state.store(abort_published_by(rank_), std::memory_order_release);
  }
  switch (kind) {
    case AbortKind::mismatch: throw MismatchError(message);
    case AbortKind::timeout: throw TimeoutError(message);
    case AbortKind::peer_lost: throw PeerLostError(message, options_.world_ranks[culprit], host_);
    case AbortKind::error: break;
  }
  throw Error(message);
}

void Communicator::probe(int awaited, const Flag& flag, uint32_t target) {
  if (test_hooks::before_probe) test_hooks::before_probe();
  // Look for a failure first and at the awaited counter after: a peer that
  // published what this wait needs and then left, died, or failed later must
  // not fail a wait that has in fact completed. (Seeing a departure or an
  // abort record with acquire makes the counter's final value visible.)
  const uint32_t abort = segment_.header().abort.state.load(std::memory_order_acquire);
  const std::optional<Loss> lost = find_lost_peer(awaited);
  if (abort == 0 && !lost) [[likely]] {
    check_abandoned(flag, target);
    return;
  }
  if (reached(flag.value.load(std::memory_order_acquire), target)) return;
  if (abort != 0) raise_recorded(abort);
  if (lost) raise_lost(*lost, awaited);
}

void Communicator::check_abandoned(const Flag& flag, uint32_t target) {
  if (!options_.abandoned || abandon_unknown_) return;
  const auto now = Clock::now();
  if (now < next_abandon_check_) return;
  next_abandon_check_ = now + options_.probe_interval;
  std::optional<std::string> why;
  try {
    why = options_.abandoned();
  } catch (const std::exception& e) {
    // The store is gone (the launcher ended): the group's own failures
    // speak for it.
    abandon_unknown_ = true;
    COHORT_LOG(debug) << "shm communicator of " << describe_rank(rank_) << " stops watching: " << e.what();
    return;
  }
  if (!why || reached(flag.value.load(std::memory_order_acquire), target)) return;
  fail(AbortKind::peer_lost, "the elastic world was abandoned (" + *why + ") while " + describe_rank(rank_) +
                                 " was in " + describe_current());
}

bool Communicator::process_exited(int peer) const {
  if (pidfds_[peer] < 0) return false;
  pollfd fd{pidfds_[peer], POLLIN, 0};
  return poll(&fd, 1, 0) > 0 && fd.revents;
}

// The awaited peer counts as lost when it is gone (its counter is checked by
// the caller); any other peer when it is gone before publishing the step this
// rank is at, which is all this rank can need from it now.
std::optional<Communicator::Loss> Communicator::find_lost_peer(int awaited) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto departure = static_cast<Departure>(segment_.control(p).departed.load(std::memory_order_acquire));
    const bool died = departure == Departure::present && process_exited(p);
    if (departure == Departure::present && !died) continue;
    if (p != awaited && reached(segment_.control(p).step.value.load(std::memory_order_acquire), step_)) continue;
    return Loss{p, died, departure};
  }
  return std::nullopt;
}

void Communicator::raise_lost(const Loss& loss, int awaited) {
  const char* how = loss.died ? " died"
                    : loss.departure == Departure::on_exception ? " left the communicator on an exception"
                                                                : " destroyed its communicator";
  fail(AbortKind::peer_lost,
       describe_rank(loss.rank) + how + " while " + describe_rank(rank_) +
           (loss.rank == awaited ? " waited for it in " : " needed it in ") + describe_current(),
       loss.rank);
}

// Raises the failure the abort record holds once it is published. A claim
// not yet published is being written, which takes microseconds; a claimer
// that died meanwhile, or has held it for kClaimGrace, is named instead.
void Communicator::raise_recorded(uint32_t state) {
  constexpr auto kClaimGrace = std::chrono::seconds(2);
  const AbortRecord& a = segment_.header().abort;
  const int claimer = abort_claimer(state);
  if (claimer == rank_ || claimer < 0 || claimer >= size_) return;  // our own (thrown already), or garbage
  if (!abort_published(state)) {
    const bool gone =
        process_exited(claimer) || segment_.control(claimer).departed.load(std::memory_order_acquire) != 0;
    if (!claim_seen_) claim_seen_ = Clock::now();
    if (!gone && Clock::now() - *claim_seen_ < kClaimGrace) return;
    failed_ = true;
    throw PeerLostError(describe_rank(claimer) + (gone ? " died" : " stopped") +
                            " while recording why the group failed; " + describe_rank(rank_) + " was in " +
                            describe_current(),
                        options_.world_ranks[claimer], host_);
  }
  failed_ = true;
  const int culprit = a.culprit >= 0 && a.culprit < size_ ? a.culprit : claimer;
  const std::string message(a.message, strnlen(a.message, sizeof a.message));
  switch (static_cast<AbortKind>(a.kind)) {
    case AbortKind::mismatch: throw MismatchError(describe_rank(claimer) + " failed: " + message);
    case AbortKind::timeout: throw TimeoutError(describe_rank(claimer) + " failed: " + message);
    case AbortKind::peer_lost:
      throw PeerLostError(message + " (found by " + describe_rank(claimer) + ")", options_.world_ranks[culprit],
                          host_);
    case AbortKind::error: break;
  }
  throw Error(describe_rank(claimer) + " failed: " + message);
}

void Communicator::mismatch(int peer, const Signature& theirs) {
  fail(AbortKind::mismatch, "ranks disagree on the collective: " + describe_rank(rank_) + " called " +
                                describe_signature(current_) + " but " + describe_rank(peer) +
                                " called " + describe_signature(theirs) + " (step " +
                                std::to_string(step_ - 1) + ")");
}

// ---------------------------------------------------------------------------
// Collectives

void Communicator::allreduce(BufferView send, BufferView recv, const AllreduceOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count) << "allreduce send and recv counts differ";
  COHORT_CHECK(send.dtype == recv.dtype) << "allreduce send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "allreduce");
  if (size_ == 1) {
    // Alone the sum is the input (and avg, min, max too): no staging through
    // the slots, which would cost two passes over the buffer.
    COHORT_CHECK(!failed_) << "the communicator failed earlier; create a new one";
    if (send.data != recv.data && send.bytes()) std::memcpy(recv.data, send.data, send.bytes());
    return;
  }
  begin_collective("allreduce",
                   make_signature(Kind::allreduce, send.dtype, send.count, uint8_t(options.op)));
  const size_t bytes = send.bytes();
  if (bytes <= options_.small_bytes && bytes <= segment_.geometry().slot_bytes)
    allreduce_small(send, recv, options.op);
  else
    allreduce_large(send, recv, options.op);
}

void Communicator::allreduce_small(BufferView send, BufferView recv, ReduceOp op) {
  begin_write();
  // An empty buffer may have no storage at all (data null), which memcpy
  // may not be given even for 0 bytes; the step is still published, so every
  // rank takes part in the collective.
  if (send.bytes()) std::memcpy(my_slot(), send.data, send.bytes());
  publish_step();
  // Every rank reduces every slot in rank order: bitwise identical results.
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) wait_peer(p);
    srcs_[p] = p == rank_ ? segment_.slot(rank_, (step_ - 1) & 1) : peer_slot(p);
  }
  reduce(op, send.dtype, recv.data, srcs_, send.count);
}

void Communicator::allreduce_large(BufferView send, BufferView recv, ReduceOp op) {
  const size_t es = dtype_size(send.dtype);
  const size_t piece = piece_elements(segment_.geometry().slot_bytes, size_, es);
  const size_t chunk = piece * size_;
  const size_t align = std::max<size_t>(1, kCacheLine / es);
  // Results larger than the caches go to memory anyway; skip the
  // read-for-ownership. Smaller ones stay cached for the caller.
  const bool stream = send.bytes() >= kStreamingBytes;
  auto& srcs = srcs_;
  for (size_t off = 0; off < send.count; off += chunk) {
    const size_t m = std::min(chunk, send.count - off);
    // Piece length in this chunk: `piece` for full chunks, balanced for the tail.
    const size_t q = std::min(piece, ceil_div(ceil_div(m, size_), align) * align);
    auto begin = [&](int p) { return std::min(size_t(p) * q, m); };
    auto length = [&](int p) { return std::min(begin(p) + q, m) - begin(p); };

    // Step 1: hand every peer its piece of my chunk; reduce mine.
    begin_write();
    for (int p = 0; p < size_; ++p)
      if (p != rank_) std::memcpy(my_slot() + size_t(p) * q * es, at(send, off + begin(p)), length(p) * es);
    publish_step();
    srcs[0] = at(send, off + begin(rank_));
    for (int p = 0, i = 1; p < size_; ++p)
      if (p != rank_) {
        wait_peer(p);
        srcs[i++] = peer_slot(p) + size_t(rank_) * q * es;
      }
    // Every peer has published this step, so every peer is done with my
    // other buffer: reduce straight into it, ready to share in step 2.
    begin_write();
    std::byte* mine = my_slot();
    reduce(op, send.dtype, mine, srcs, length(rank_));

    // Step 2: share my reduced piece; collect every piece into recv. recv is
    // written once, with streaming stores when the message is large.
    publish_step();
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) wait_peer(p);
      const std::byte* piece_data = p == rank_ ? mine : peer_slot(p);
      if (stream)
        copy_streaming(at(recv, off + begin(p)), piece_data, length(p) * es);
      else
        std::memcpy(at(recv, off + begin(p)), piece_data, length(p) * es);
    }
  }
}

void Communicator::broadcast(BufferView buffer, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "broadcast root " << root << " outside [0, " << size_ << ")";
  begin_collective("broadcast", make_signature(Kind::broadcast, buffer.dtype, buffer.count, kNoOp, root));
  const size_t slot = segment_.geometry().slot_bytes;
  const size_t bytes = buffer.bytes();
  for (size_t off = 0; off < bytes; off += slot) {
    const size_t len = std::min(slot, bytes - off);
    if (rank_ == root) {
      begin_write();
      std::memcpy(my_slot(), buffer.byte_data() + off, len);
      publish_step();
    } else {
      publish_step();
      wait_peer(root);
      std::memcpy(buffer.byte_data() + off, peer_slot(root), len);
    }
  }
}

void Communicator::allgather(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(recv.count, send.count * size_) << "allgather recv must hold size() sends";
  std::vector<size_t> counts(size_, send.count);
  allgatherv(send, recv, counts);
}

void Communicator::allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) {
  COHORT_CHECK_EQ(counts.size(), size_t(size_)) << "allgatherv needs one count per rank";
  COHORT_CHECK_EQ(send.count, counts[rank_]) << "allgatherv send count differs from counts[rank]";
  COHORT_CHECK(send.dtype == recv.dtype) << "allgatherv send and recv dtypes differ";
  const auto displ = displacements(counts);
  COHORT_CHECK_EQ(recv.count, displ.back()) << "allgatherv recv must hold the sum of counts";
  begin_collective("allgather", make_signature(Kind::allgatherv, send.dtype, displ.back()));
  const size_t es = dtype_size(send.dtype);
  const size_t per_step = segment_.geometry().slot_bytes / es;
  const size_t longest = *std::max_element(counts.begin(), counts.end());
  // In place when send already is this rank's block of recv.
  if (send.data != at(recv, displ[rank_])) {
    check_no_partial_overlap(send, recv, "allgather");
    copy_bytes(at(recv, displ[rank_]), send.byte_data(), send.bytes());
  }
  const std::byte* own = at(recv, displ[rank_]);
  for (size_t off = 0; off < longest; off += per_step) {
    const auto len = [&](int p) { return off < counts[p] ? std::min(per_step, counts[p] - off) : 0; };
    if (len(rank_)) {
      begin_write();
      std::memcpy(my_slot(), own + off * es, len(rank_) * es);
    }
    publish_step();
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && len(p)) {
        wait_peer(p);
        std::memcpy(at(recv, displ[p] + off), peer_slot(p), len(p) * es);
      }
  }
}

void Communicator::gather(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "gather root " << root << " outside [0, " << size_ << ")";
  if (rank_ == root) {
    COHORT_CHECK_EQ(recv.count, send.count * size_) << "gather recv must hold size() sends on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "gather send and recv dtypes differ";
  }
  begin_collective("gather", make_signature(Kind::gather, send.dtype, send.count, kNoOp, root));
  const size_t es = dtype_size(send.dtype);
  const size_t per_step = segment_.geometry().slot_bytes / es;
  if (rank_ == root) copy_bytes(at(recv, send.count * root), send.byte_data(), send.bytes());
  for (size_t off = 0; off < send.count; off += per_step) {
    const size_t len = std::min(per_step, send.count - off);
    if (rank_ != root) {
      begin_write();
      std::memcpy(my_slot(), at(send, off), len * es);
      publish_step();
    } else {
      publish_step();
      for (int p = 0; p < size_; ++p)
        if (p != root) {
          wait_peer(p);
          std::memcpy(at(recv, send.count * p + off), peer_slot(p), len * es);
        }
    }
  }
}

template <typename Consume>
void Communicator::exchange_blocks(BufferView send, size_t block, bool writes, Consume&& consume) {
  const size_t es = dtype_size(send.dtype);
  const size_t piece = piece_elements(segment_.geometry().slot_bytes, size_, es);
  for (size_t off = 0; off < block; off += piece) {
    const size_t len = std::min(piece, block - off);
    if (writes) {
      begin_write();
      for (int p = 0; p < size_; ++p)
        if (p != rank_) std::memcpy(my_slot() + size_t(p) * piece * es, at(send, block * p + off), len * es);
    }
    publish_step();
    consume(off, len, piece * es);
  }
}

void Communicator::reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count * size_) << "reduce_scatter send must hold size() recv blocks";
  COHORT_CHECK(send.dtype == recv.dtype) << "reduce_scatter send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "reduce_scatter");
  begin_collective("reduce_scatter",
                   make_signature(Kind::reduce_scatter, recv.dtype, recv.count, uint8_t(options.op)));
  const size_t block = recv.count;
  auto& srcs = srcs_;
  exchange_blocks(send, block, true, [&](size_t off, size_t len, size_t piece_bytes) {
    srcs[0] = at(send, block * rank_ + off);
    for (int p = 0, i = 1; p < size_; ++p)
      if (p != rank_) {
        wait_peer(p);
        srcs[i++] = peer_slot(p) + size_t(rank_) * piece_bytes;
      }
    reduce(options.op, recv.dtype, at(recv, off), srcs, len);
  });
}

void Communicator::alltoall(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(send.count, recv.count) << "alltoall send and recv counts differ";
  COHORT_CHECK_EQ(send.count % size_, size_t(0)) << "alltoall count must divide by size()";
  COHORT_CHECK(send.dtype == recv.dtype) << "alltoall send and recv dtypes differ";
  COHORT_CHECK(send.data != recv.data || size_ == 1) << "alltoall cannot run in place";
  check_no_partial_overlap(send, recv, "alltoall");
  begin_collective("alltoall", make_signature(Kind::alltoall, send.dtype, send.count));
  const size_t block = send.count / size_;
  const size_t es = dtype_size(send.dtype);
  copy_bytes(at(recv, block * rank_), at(send, block * rank_), block * es);
  exchange_blocks(send, block, true, [&](size_t off, size_t len, size_t piece_bytes) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) {
        wait_peer(p);
        std::memcpy(at(recv, block * p + off), peer_slot(p) + size_t(rank_) * piece_bytes, len * es);
      }
  });
}

void Communicator::scatter(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "scatter root " << root << " outside [0, " << size_ << ")";
  if (rank_ == root) {
    COHORT_CHECK_EQ(send.count, recv.count * size_) << "scatter send must hold size() blocks on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "scatter send and recv dtypes differ";
  }
  begin_collective("scatter", make_signature(Kind::scatter, recv.dtype, recv.count, kNoOp, root));
  const size_t es = dtype_size(recv.dtype);
  const size_t block = recv.count;
  if (rank_ == root) copy_bytes(recv.byte_data(), at(send, block * root), block * es);
  BufferView source = rank_ == root ? send : BufferView{nullptr, 0, recv.dtype};
  exchange_blocks(source, block, rank_ == root, [&](size_t off, size_t len, size_t piece_bytes) {
    if (rank_ == root) return;
    wait_peer(root);
    std::memcpy(at(recv, off), peer_slot(root) + size_t(rank_) * piece_bytes, len * es);
  });
}

void Communicator::alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                             std::span<const size_t> recv_counts) {
  COHORT_CHECK_EQ(send_counts.size(), size_t(size_)) << "alltoallv needs one send count per rank";
  COHORT_CHECK_EQ(recv_counts.size(), size_t(size_)) << "alltoallv needs one recv count per rank";
  COHORT_CHECK(send.dtype == recv.dtype) << "alltoallv send and recv dtypes differ";
  const auto sdispl = displacements(send_counts);
  const auto rdispl = displacements(recv_counts);
  COHORT_CHECK_LE(sdispl.back(), send.count) << "alltoallv send counts exceed the send buffer";
  COHORT_CHECK_LE(rdispl.back(), recv.count) << "alltoallv recv counts exceed the recv buffer";
  COHORT_CHECK_EQ(send_counts[rank_], recv_counts[rank_]) << "alltoallv: this rank's block to itself";
  COHORT_CHECK(send.data != recv.data || size_ == 1) << "alltoallv cannot run in place";
  begin_collective("alltoallv", make_signature(Kind::alltoallv, send.dtype, 0));
  const size_t es = dtype_size(send.dtype);
  copy_bytes(at(recv, rdispl[rank_]), at(send, sdispl[rank_]), send_counts[rank_] * es);

  // The number of steps depends on the largest block anywhere: agree on it.
  uint64_t longest = 0;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) longest = std::max<uint64_t>({longest, send_counts[p], recv_counts[p]});
  begin_write();
  std::memcpy(my_slot(), &longest, sizeof longest);
  publish_step();
  for (int p = 0; p < size_; ++p)
    if (p != rank_) {
      wait_peer(p);
      uint64_t theirs;
      std::memcpy(&theirs, peer_slot(p), sizeof theirs);
      longest = std::max(longest, theirs);
    }

  const size_t piece = piece_elements(segment_.geometry().slot_bytes, size_, es);
  auto part = [&](size_t count, size_t off) { return off < count ? std::min(piece, count - off) : 0; };
  for (size_t off = 0; off < longest; off += piece) {
    begin_write();
    for (int p = 0; p < size_; ++p)
      if (p != rank_)
        std::memcpy(my_slot() + size_t(p) * piece * es, at(send, sdispl[p] + off), part(send_counts[p], off) * es);
    publish_step();
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && part(recv_counts[p], off)) {
        wait_peer(p);
        std::memcpy(at(recv, rdispl[p] + off), peer_slot(p) + size_t(rank_) * piece * es,
                    part(recv_counts[p], off) * es);
      }
  }
}

void Communicator::barrier() {
  begin_collective("barrier", make_signature(Kind::barrier, DType::u8, 0));
  publish_step();
  wait_all_peers();
}

// ---------------------------------------------------------------------------
// Point to point

void Communicator::send(BufferView buffer, int dst, uint32_t tag) {
  COHORT_CHECK(dst >= 0 && dst < size_ && dst != rank_) << "send to rank " << dst << " from rank " << rank_;
  begin_collective("send", make_signature(Kind::setup, buffer.dtype, buffer.count));
  Channel& ch = segment_.channel(rank_, dst);
  const size_t cap = segment_.geometry().channel_bytes;
  const size_t bytes = buffer.bytes();
  const size_t chunks = std::max<size_t>(1, ceil_div(bytes, cap));
  for (size_t i = 0; i < chunks; ++i) {
    const uint32_t k = sent_[dst];
    // The buffer of parity k was last used by chunk k - 2; it is free once the
    // receiver has taken chunk k - 2.
    if (k >= 2 && !await(dst, ch.taken, k - 1))
      fail(AbortKind::timeout, "send of " + std::to_string(bytes) + " bytes (tag " + std::to_string(tag) +
                                   ") from " + describe_rank(rank_) + " timed out: " + describe_rank(dst) +
                                   " is not receiving");
    ch.meta[k & 1] = ChunkMeta{tag, uint32_t(buffer.dtype), bytes};
    const size_t off = i * cap;
    std::memcpy(segment_.channel_buffer(rank_, dst, k & 1), buffer.byte_data() + off,
                std::min(cap, bytes - off));
    sent_[dst] = k + 1;
    publish(ch.sent, k + 1);
  }
}

void Communicator::recv(BufferView buffer, int src, uint32_t tag) {
  COHORT_CHECK(src >= 0 && src < size_ && src != rank_) << "recv from rank " << src << " on rank " << rank_;
  begin_collective("recv", make_signature(Kind::setup, buffer.dtype, buffer.count));
  Channel& ch = segment_.channel(src, rank_);
  const size_t cap = segment_.geometry().channel_bytes;
  const size_t bytes = buffer.bytes();
  const size_t chunks = std::max<size_t>(1, ceil_div(bytes, cap));
  for (size_t i = 0; i < chunks; ++i) {
    const uint32_t k = taken_[src];
    if (!await(src, ch.sent, k + 1))
      fail(AbortKind::timeout, "recv of " + std::to_string(bytes) + " bytes (tag " + std::to_string(tag) +
                                   ") on " + describe_rank(rank_) + " timed out: " + describe_rank(src) +
                                   " sent nothing");
    const ChunkMeta meta = ch.meta[k & 1];
    if (meta.tag != tag || meta.total_bytes != bytes || meta.dtype != uint32_t(buffer.dtype))
      fail(AbortKind::mismatch,
           "point-to-point mismatch: " + describe_rank(rank_) + " expected tag " + std::to_string(tag) + ", " +
               std::to_string(buffer.count) + " " + std::string(dtype_name(buffer.dtype)) + " from " +
               describe_rank(src) + ", which sent tag " + std::to_string(meta.tag) + ", " +
               std::to_string(meta.total_bytes) + " bytes of " +
               std::string(dtype_name(static_cast<DType>(meta.dtype))));
    const size_t off = i * cap;
    std::memcpy(buffer.byte_data() + off, segment_.channel_buffer(src, rank_, k & 1),
                std::min(cap, bytes - off));
    taken_[src] = k + 1;
    publish(ch.taken, k + 1);
  }
}

// ---------------------------------------------------------------------------
// Sub-groups

std::unique_ptr<comm::Communicator> Communicator::split(int color, int key) {
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * size_t(size_));
  allgather(BufferView{mine, 2, DType::i32}, BufferView{all.data(), all.size(), DType::i32});
  const int id = splits_++;
  if (color < 0) return nullptr;
  const std::vector<int> members = split_members(all, color);
  Options sub = options_;
  sub.world_ranks.clear();
  for (int p : members) sub.world_ranks.push_back(options_.world_ranks[p]);
  const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
  auto store = std::make_shared<rendezvous::PrefixStore>(
      "split" + std::to_string(id) + "/" + std::to_string(color), store_);
  return std::make_unique<Communicator>(std::move(store), new_rank, int(members.size()), std::move(sub));
}

}  // namespace cohort::comm::shm
