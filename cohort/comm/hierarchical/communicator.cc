#include "cohort/comm/hierarchical/communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "cohort/comm/f32_average.h"
#include "cohort/common/check.h"
#include "cohort/common/host_key.h"
#include "cohort/common/reduce.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::comm::hierarchical {

Options options_from_env() {
  Options o;
  o.shm = shm::options_from_env();
  return o;
}

// Marks the communicator failed when a collective throws, and tears down the
// local group while the exception is in flight: the shm communicator then
// publishes that this rank left on an error, so its host's other ranks raise
// PeerLostError at once instead of waiting for it until their timeout.
class Communicator::Guard {
 public:
  explicit Guard(Communicator& c) : c_(c), exceptions_(std::uncaught_exceptions()) {
    COHORT_CHECK(!c_.failed_) << "the hierarchical communicator failed earlier; create a new one";
  }
  ~Guard() {
    if (std::uncaught_exceptions() > exceptions_) {
      c_.failed_ = true;
      c_.local_.reset();
    }
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  Communicator& c_;
  int exceptions_;
};

Communicator::Communicator(std::unique_ptr<comm::Communicator> flat, std::shared_ptr<rendezvous::Store> store,
                           Options options)
    : flat_(std::move(flat)), store_(std::move(store)), options_(std::move(options)) {
  COHORT_CHECK(flat_ != nullptr) << "hierarchical communicator needs a cross-host communicator";
  COHORT_CHECK(store_ != nullptr) << "hierarchical communicator needs a store";
  COHORT_CHECK_AS(ConfigError, options_.chunk_bytes >= 4096) << "hierarchical chunk_bytes must be at least 4096";
  rank_ = flat_->rank();
  size_ = flat_->size();
  if (options_.host_key.empty()) options_.host_key = net::host_key();

  // The hash travels as an i64: only its bits matter.
  uint64_t mine = net::host_key_hash(options_.host_key);
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  flat_->allgather(BufferView{&mine, 1, DType::i64}, BufferView{all.data(), all.size(), DType::i64});
  topology_ = make_topology(all);
  host_ = topology_.host_of[rank_];
  local_rank_ = topology_.local_rank_of[rank_];
  local_size_ = topology_.local_size[host_];

  shm::Options local_options = options_.shm;
  local_options.world_ranks.clear();
  for (int r = 0; r < size_; ++r)
    if (topology_.host_of[r] == host_) local_options.world_ranks.push_back(r);
  local_ = std::make_unique<shm::Communicator>(
      std::make_shared<rendezvous::PrefixStore>("host" + std::to_string(host_), store_), local_rank_, local_size_,
      std::move(local_options));
  // Cross communicator k: local rank k of every host, in host order.
  cross_ = flat_->split(local_rank_ < topology_.min_local ? local_rank_ : -1, host_);
}

Communicator::~Communicator() = default;

BufferView Communicator::scratch(size_t count, DType dtype, int which) {
  const size_t bytes = count * dtype_size(dtype);
  if (scratch_[which].size() < bytes) scratch_[which].resize(bytes);
  return BufferView{scratch_[which].data(), count, dtype};
}

Communicator::Helper::~Helper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Communicator::Helper::start(std::function<void()> task) {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  {
    std::lock_guard lock(mutex_);
    task_ = std::move(task);
    busy_ = true;
  }
  cv_.notify_all();
}

void Communicator::Helper::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void Communicator::Helper::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || busy_; });
    if (stop_) return;
    std::function<void()> task = std::move(task_);
    lock.unlock();
    try {
      task();
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

size_t Communicator::chunk_elements(DType dtype) const {
  const size_t m = static_cast<size_t>(topology_.min_local);
  return std::max(m, options_.chunk_bytes / dtype_size(dtype) / m * m);
}

// ---------------------------------------------------------------------------
// Allreduce

void Communicator::allreduce(BufferView send, BufferView recv, const AllreduceOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count) << "allreduce send and recv counts differ";
  COHORT_CHECK(send.dtype == recv.dtype) << "allreduce send and recv dtypes differ";
  Guard guard(*this);
  if (topology_.hosts == 1) return local_->allreduce(send, recv, options);
  if (topology_.hosts == size_) return flat_->allreduce(send, recv, options);
  if (average_needs_f32(send.dtype, options.op)) return allreduce_average_in_f32(*this, send, recv);
  // avg is a sum until the end: local sizes may differ between hosts.
  const bool average = options.op == ReduceOp::avg;
  const ReduceOp op = average ? ReduceOp::sum : options.op;
  const size_t n = send.count;
  if (send.bytes() <= options_.small_bytes) return allreduce_small(send, recv, op, average);
  const size_t m = static_cast<size_t>(topology_.min_local);
  const size_t chunk = chunk_elements(send.dtype);
  // Every host decides alike: the pipeline runs when all hosts have M ranks.
  if (topology_.uniform && n / chunk >= 2) {
    const size_t whole = n / chunk * chunk;
    allreduce_pipelined(send.slice(0, whole), recv.slice(0, whole), chunk, op, average);
    if (whole == n) return;
    send = send.slice(whole, n - whole);
    recv = recv.slice(whole, n - whole);
  }
  for (size_t off = 0; off < send.count; off += chunk) {
    const size_t len = std::min(chunk, send.count - off);
    const size_t slice = len / m;
    if (slice > 0) allreduce_slices(send.slice(off, slice * m), recv.slice(off, slice * m), slice, op, average);
    if (slice * m < len)
      allreduce_small(send.slice(off + slice * m, len - slice * m), recv.slice(off + slice * m, len - slice * m), op,
                      average);
  }
}

void Communicator::allreduce_pipelined(BufferView send, BufferView recv, size_t chunk, ReduceOp op, bool average) {
  // send.count is a multiple of chunk, chunk a multiple of local_size_.
  const size_t slice = chunk / size_t(local_size_);
  const size_t chunks = send.count / chunk;
  if (!helper_) helper_ = std::make_unique<Helper>();
  // If this thread fails, the helper must be done with scratch before the
  // error leaves; its own error (if any) then loses to this one.
  struct Drain {
    Helper& helper;
    bool armed = true;
    ~Drain() {
      if (!armed) return;
      try {
        helper.wait();
      } catch (...) {
      }
    }
  } drain{*helper_};
  bool in_flight = false;
  for (size_t c = 0; c <= chunks; ++c) {
    BufferView staged;
    if (c < chunks) {
      staged = scratch(slice, recv.dtype, int(c % 2));
      local_->reduce_scatter(send.slice(c * chunk, chunk), staged, {.op = op});
    }
    if (in_flight) {
      drain.armed = false;
      helper_->wait();
      drain.armed = true;
      in_flight = false;
    }
    if (c < chunks) {
      comm::Communicator* cross = cross_.get();
      const int size = size_;
      helper_->start([cross, staged, op, average, size] {
        cross->allreduce(staged, {.op = op});
        if (average) finish_average(staged.dtype, staged.data, staged.count, size);
      });
      in_flight = true;
    }
    if (c > 0) local_->allgather(scratch(slice, recv.dtype, int((c - 1) % 2)), recv.slice((c - 1) * chunk, chunk));
  }
  drain.armed = false;
}

void Communicator::allreduce_small(BufferView send, BufferView recv, ReduceOp op, bool average) {
  local_->allreduce(send, recv, {.op = op});
  if (local_rank_ == 0) {
    cross_->allreduce(recv, {.op = op});
    if (average) finish_average(recv.dtype, recv.data, recv.count, size_);
  }
  local_->broadcast(recv, 0);
}

void Communicator::allreduce_slices(BufferView send, BufferView recv, size_t slice, ReduceOp op, bool average) {
  const int m = topology_.min_local;
  if (local_size_ == m) {
    // The slice is staged in scratch: reduce_scatter cannot write into its
    // own input, as an in-place allreduce would need.
    const BufferView mine = scratch(slice, recv.dtype, 0);
    local_->reduce_scatter(send, mine, {.op = op});
    cross_->allreduce(mine, {.op = op});
    if (average) finish_average(mine.dtype, mine.data, mine.count, size_);
    local_->allgather(mine, recv);
    return;
  }
  local_->allreduce(send, recv, {.op = op});
  if (local_rank_ < m) {
    const BufferView mine = recv.slice(size_t(local_rank_) * slice, slice);
    cross_->allreduce(mine, {.op = op});
    if (average) finish_average(mine.dtype, mine.data, mine.count, size_);
  }
  for (int k = 0; k < m; ++k) local_->broadcast(recv.slice(size_t(k) * slice, slice), k);
}

// ---------------------------------------------------------------------------
// Broadcast

void Communicator::broadcast(BufferView buffer, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "broadcast root " << root << " outside [0, " << size_ << ")";
  Guard guard(*this);
  if (topology_.hosts == 1) return local_->broadcast(buffer, topology_.local_rank_of[root]);
  if (topology_.hosts == size_) return flat_->broadcast(buffer, root);
  const int root_host = topology_.host_of[root];
  const int root_local = topology_.local_rank_of[root];
  if (buffer.bytes() <= options_.small_bytes) return broadcast_small(buffer, root_host, root_local);
  const size_t m = static_cast<size_t>(topology_.min_local);
  const size_t chunk = chunk_elements(buffer.dtype);
  for (size_t off = 0; off < buffer.count; off += chunk) {
    const size_t len = std::min(chunk, buffer.count - off);
    const size_t slice = len / m;
    if (slice > 0) broadcast_slices(buffer.slice(off, slice * m), slice, root_host, root_local);
    if (slice * m < len) broadcast_small(buffer.slice(off + slice * m, len - slice * m), root_host, root_local);
  }
}

void Communicator::broadcast_small(BufferView buffer, int root_host, int root_local) {
  if (host_ == root_host) local_->broadcast(buffer, root_local);
  if (local_rank_ == 0) cross_->broadcast(buffer, root_host);
  if (host_ != root_host) local_->broadcast(buffer, 0);
}

void Communicator::broadcast_slices(BufferView buffer, size_t slice, int root_host, int root_local) {
  const int m = topology_.min_local;
  if (host_ == root_host) local_->broadcast(buffer, root_local);
  if (local_rank_ < m) cross_->broadcast(buffer.slice(size_t(local_rank_) * slice, slice), root_host);
  if (host_ == root_host) return;
  if (local_size_ == m) {
    // In place: this rank's slice already is its block of the result.
    local_->allgather(buffer.slice(size_t(local_rank_) * slice, slice), buffer);
  } else {
    for (int k = 0; k < m; ++k) local_->broadcast(buffer.slice(size_t(k) * slice, slice), k);
  }
}

// ---------------------------------------------------------------------------
// Allgather

void Communicator::allgather(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(recv.count, send.count * size_t(size_)) << "allgather recv must hold size() sends";
  Guard guard(*this);
  if (topology_.hosts == 1) return local_->allgather(send, recv);
  if (topology_.hosts == size_ || !topology_.uniform || !topology_.contiguous) return flat_->allgather(send, recv);
  const size_t c = send.count;
  const size_t block = size_t(local_size_) * c;  // this host's part of recv
  const size_t begin = size_t(topology_.first_rank[host_]) * c;
  local_->allgather(send, recv.slice(begin, block));
  if (local_rank_ == 0 && block > 0) {
    // Host blocks cross in pieces staged in scratch, so that memory stays
    // bounded and cross_'s send and recv never overlap.
    const size_t hosts = static_cast<size_t>(topology_.hosts);
    const size_t piece = std::max<size_t>(1, options_.chunk_bytes / dtype_size(recv.dtype) / hosts);
    const size_t es = dtype_size(recv.dtype);
    for (size_t off = 0; off < block; off += piece) {
      const size_t len = std::min(piece, block - off);
      const BufferView stage = scratch(len * hosts, recv.dtype, 0);
      cross_->allgather(recv.slice(begin + off, len), stage);
      for (int h = 0; h < topology_.hosts; ++h)
        if (h != host_)
          std::memcpy(recv.slice(size_t(topology_.first_rank[h]) * c + off, len).data,
                      stage.slice(size_t(h) * len, len).data, len * es);
    }
  }
  if (begin > 0) local_->broadcast(recv.slice(0, begin), 0);
  if (begin + block < recv.count) local_->broadcast(recv.slice(begin + block, recv.count - begin - block), 0);
}

// ---------------------------------------------------------------------------
// The rest runs on the flat communicator.

void Communicator::allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) {
  Guard guard(*this);
  flat_->allgatherv(send, recv, counts);
}

void Communicator::reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options) {
  Guard guard(*this);
  flat_->reduce_scatter(send, recv, options);
}

void Communicator::alltoall(BufferView send, BufferView recv) {
  Guard guard(*this);
  flat_->alltoall(send, recv);
}

void Communicator::alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                             std::span<const size_t> recv_counts) {
  Guard guard(*this);
  flat_->alltoallv(send, send_counts, recv, recv_counts);
}

void Communicator::gather(BufferView send, BufferView recv, int root) {
  Guard guard(*this);
  flat_->gather(send, recv, root);
}

void Communicator::scatter(BufferView send, BufferView recv, int root) {
  Guard guard(*this);
  flat_->scatter(send, recv, root);
}

void Communicator::barrier() {
  Guard guard(*this);
  flat_->barrier();
}

void Communicator::send(BufferView buffer, int dst, uint32_t tag) {
  Guard guard(*this);
  flat_->send(buffer, dst, tag);
}

void Communicator::recv(BufferView buffer, int src, uint32_t tag) {
  Guard guard(*this);
  flat_->recv(buffer, src, tag);
}

std::unique_ptr<comm::Communicator> Communicator::split(int color, int key) {
  Guard guard(*this);
  std::unique_ptr<comm::Communicator> sub = flat_->split(color, key);
  const int id = splits_++;
  if (!sub) return nullptr;
  auto store = std::make_shared<rendezvous::PrefixStore>(
      "split" + std::to_string(id) + "/" + std::to_string(color), store_);
  return std::make_unique<Communicator>(std::move(sub), std::move(store), options_);
}

}  // namespace cohort::comm::hierarchical
