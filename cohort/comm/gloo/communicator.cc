#include "cohort/comm/gloo/communicator.h"

#include "cohort/comm/buffer_util.h"
#include "cohort/comm/f32_average.h"
#include "cohort/comm/messages.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <net/if.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <span>
#include <sstream>
#include <utility>

#include "cohort/comm/gloo/connection_shutdown.h"
#include "cohort/comm/gloo/failure_report.h"
#include "cohort/comm/gloo/store_adapter.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/reduce.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::comm::gloo {
namespace {

enum class Kind : uint8_t {
  allreduce = 1, broadcast, allgather, allgatherv, reduce_scatter, alltoall, alltoallv,
  gather, scatter, barrier, send, recv
};
constexpr const char* kKindNames[] = {"?",          "allreduce", "broadcast", "allgather", "allgatherv",
                                      "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter",
                                      "barrier",    "send",      "recv"};
constexpr uint8_t kNoOp = 0xff;

// Slot prefixes of our own exchanges; Gloo's collectives use 0x01..0x08
// (gloo/types.h), so they can never match ours.
constexpr uint8_t kPointToPointSlot = 0x40;
constexpr uint8_t kReduceScatterSlot = 0x41;
constexpr uint8_t kProbeSlot = 0x42;

// What travels before (or with) every point-to-point payload.
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

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 over the running hash: distinct calls get unrelated tags.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Gloo's typed setters want an element type of the right size; reductions
// get the real dtype through the reduce function.
template <typename F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

bool mentions_timeout(const std::string& what) {
  std::string lower = what;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// Gloo writes to its sockets with writev(2), which raises SIGPIPE when the
// peer is gone; the default action would kill the process instead of letting
// Gloo report the closed connection (Python, Gloo's usual host, ignores
// SIGPIPE at startup). Ignore it unless the program installed a handler.
void ignore_sigpipe() {
  static const bool done = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)done;
}

std::shared_ptr<::gloo::transport::Device> create_device(const Options& options) {
  ignore_sigpipe();
  ::gloo::transport::tcp::attr attr;
  // create.cc fills iface or hostname from net::listen_choice; a
  // communicator made with neither takes that choice's own fallback.
  const net::ListenChoice listen = options.iface.empty() && options.hostname.empty()
                                       ? net::listen_choice("", false, "")
                                       : net::ListenChoice{.iface = options.iface, .address = options.hostname};
  std::string what;
  if (!listen.iface.empty()) {
    if (if_nametoindex(listen.iface.c_str()) == 0) {
      std::string known;
      for (const auto& name : net::interfaces_with_ipv4()) known += (known.empty() ? "" : ", ") + name;
      COHORT_THROW(ConfigError) << "COHORT_IFACE='" << listen.iface
                                << "': no such network interface (interfaces with an IPv4 address: " << known << ")";
    }
    attr.iface = listen.iface;
    what = "interface " + listen.iface;
  } else {
    attr.hostname = listen.address;
    what = (listen.why == "the host name" ? "host name " : "address ") + listen.address;
  }
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    COHORT_THROW(ConfigError) << "gloo cannot listen on " << what << ": " << e.what()
                              << " (set COHORT_IFACE to an interface every rank reaches)";
  }
}

}  // namespace

// One call's identity: what the ranks must agree on, and how to name it.
struct Communicator::Call {
  Kind kind;
  DType dtype = DType::u8;
  uint64_t count = 0;
  uint8_t op = kNoOp;
  int root = -1;       // or the peer of send/recv
  uint64_t extra = 0;  // e.g. a hash of allgatherv's counts
  uint32_t tag = 0;    // send/recv only
  uint64_t sequence = 0;

  bool collective() const { return kind != Kind::send && kind != Kind::recv; }
  uint64_t signature() const {
    uint64_t h = mix(uint64_t(kind), uint64_t(dtype));
    h = mix(h, count);
    h = mix(h, op);
    h = mix(h, uint64_t(int64_t(root)));
    return mix(h, extra);
  }
  std::string describe() const {
    std::ostringstream os;
    os << kKindNames[int(kind)] << '(' << count << ' ' << dtype_name(dtype);
    if (op != kNoOp) os << ", " << reduce_op_name(static_cast<ReduceOp>(op));
    if (kind == Kind::send || kind == Kind::recv)
      os << ", tag " << tag << (kind == Kind::send ? ", to " : ", from ") << "rank " << root;
    else if (root >= 0)
      os << ", root " << root;
    os << ')';
    return os.str();
  }
};

struct Communicator::Outgoing {
  std::vector<char> bytes;
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
};

Options options_from_env() {
  Options o;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(tunables::timeout_s() * 1000));
  o.iface = tunables::iface();
  const int64_t bcube = tunables::gloo_bcube_bytes();
  COHORT_CHECK_AS(ConfigError, bcube >= 0) << "COHORT_GLOO_BCUBE_BYTES=" << bcube << " must not be negative";
  o.bcube_max_bytes = static_cast<size_t>(bcube);
  return o;
}

Communicator::Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options)
    : Communicator(std::move(store), rank, size, std::move(options), nullptr) {}

Communicator::Communicator(std::shared_ptr<rendezvous::Store> store, int rank, int size, Options options,
                           std::shared_ptr<::gloo::transport::Device> device)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)), device_(std::move(device)) {
  COHORT_CHECK_AS(ConfigError, size >= 1) << "communicator size must be positive";
  COHORT_CHECK_AS(ConfigError, rank >= 0 && rank < size) << "rank " << rank << " outside [0, " << size << ")";
  COHORT_CHECK(store_ != nullptr) << "gloo communicator needs a store";
  COHORT_CHECK_AS(ConfigError, options_.timeout.count() > 0) << "gloo communicator timeout must be positive";
  COHORT_CHECK_AS(ConfigError, options_.chunk_bytes >= 64) << "gloo chunk_bytes must be at least 64";
  if (options_.world_ranks.empty()) {
    options_.world_ranks.resize(size_);
    std::iota(options_.world_ranks.begin(), options_.world_ranks.end(), 0);
  }
  COHORT_CHECK_EQ(options_.world_ranks.size(), size_t(size_));
  if (!device_) device_ = create_device(options_);
  report_ = std::make_unique<FailureReport>(store_, rank_, options_.failure_grace);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(options_.timeout);
  context_ = context;
  try {
    StoreAdapter adapter(store_, options_.timeout);
    context->connectFullMesh(adapter, device_);
  } catch (const Error&) {
    throw;  // the store's own TimeoutError / PeerLostError name the keys
  } catch (const std::exception& e) {
    const std::string what = "gloo: rank " + std::to_string(options_.world_ranks[rank_]) +
                             " could not connect to its " + std::to_string(size_ - 1) +
                             " peers through " + device_address() + ": " + e.what();
    if (mentions_timeout(e.what())) throw TimeoutError(what);
    throw PeerLostError(what, -1);
  }
  if (size_ > 1) {
    // A message longer than the receive posted for it would abort Gloo's
    // event loop: every rank must use the same eager size, the smallest.
    uint64_t eager = options_.eager_bytes;
    try {
      ::gloo::AllreduceOptions o(context_);
      o.setOutput<uint64_t>(&eager, 1);
      o.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
        for (size_t i = 0; i < n; ++i)
          static_cast<uint64_t*>(c)[i] =
              std::min(static_cast<const uint64_t*>(a)[i], static_cast<const uint64_t*>(b)[i]);
      });
      o.setTag(0xffffffffu);  // before any call: collective tags are hashes of calls
      o.setTimeout(options_.timeout);
      ::gloo::allreduce(o);
    } catch (const std::exception& e) {
      const std::string what = "gloo: rank " + std::to_string(options_.world_ranks[rank_]) +
                               " could not agree on settings with its peers: " + e.what();
      if (mentions_timeout(e.what())) throw TimeoutError(what);
      throw PeerLostError(what, -1);
    }
    options_.eager_bytes = eager;
  }
  outgoing_.resize(size_);
  header_in_.resize(sizeof(MessageHeader) + options_.eager_bytes);
  header_in_buffer_ = context_->createUnboundBuffer(header_in_.data(), header_in_.size());
  if (options_.abandoned) {
    // What abort() needs to find this rank's connections from the peers'
    // side (connection_shutdown.h).
    if (size_ > 1) store_->set(pairs_key(rank_), own_endpoints());
    watcher_ = std::thread([this] { watch_abandoned(); });
  }
}

Communicator::~Communicator() {
  if (watcher_.joinable()) {
    {
      std::lock_guard lock(watch_mutex_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    watcher_.join();
  }
  try {
    if (aborted_.load()) {
      // Abandoned: nothing more reaches the peers (the pairs are closed).
    } else if (!failed_ && std::uncaught_exceptions() > 0) {
      // Peers waiting for us learn why at once instead of at their timeout.
      report_->publish({FailureRecord::Kind::left, calls_, "", -1,
                        describe_rank(rank_) + " left the communicator on an exception"});
      context_->closeConnections();
    } else if (!failed_) {
      // Buffered sends must reach their receivers before the connections go.
      for (int p = 0; p < size_; ++p) reap_outgoing(p, 0);
    }
  } catch (const std::exception& e) {
    COHORT_LOG(warn) << "gloo communicator of " << describe_rank(rank_) << " closing: " << e.what();
  }
  header_in_buffer_.reset();
  outgoing_.clear();
  spare_.clear();
}

std::string Communicator::device_address() const {
  const std::string s = device_ ? device_->str() : "";
  const size_t at = s.find("addr=");
  return at == std::string::npos ? s : s.substr(at + 5);
}

std::string Communicator::describe_rank(int r) const {
  return "rank " + std::to_string(options_.world_ranks[r]);
}

// ---------------------------------------------------------------------------
// Abandoning

std::string Communicator::pairs_key(int rank) { return "pairs/" + std::to_string(rank); }

std::string Communicator::own_endpoints() const {
  std::string text;
  for (int p = 0; p < size_; ++p) {
    if (p > 0) text += ",";
    if (p == rank_) continue;
    const auto& address = dynamic_cast<const ::gloo::transport::tcp::Address&>(context_->getPair(p)->address());
    text += endpoint_text(endpoint_of(address.getSockaddr()));
  }
  return text;
}

void Communicator::abort(const std::string& why) {
  {
    std::lock_guard lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = why;
    aborted_.store(true);
  }
  if (size_ == 1) return;
  // Each pair's connection: the one accepted on its listening address, or
  // the one made to the peer pair's (which the peer published).
  std::vector<TcpEndpoint> local, remote;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto& address = dynamic_cast<const ::gloo::transport::tcp::Address&>(context_->getPair(p)->address());
    local.push_back(endpoint_of(address.getSockaddr()));
    try {
      const rendezvous::Bytes theirs = store_->get(pairs_key(p), std::chrono::seconds(5));
      const std::string list(theirs.begin(), theirs.end());
      size_t begin = 0;
      for (int k = 0; k < rank_; ++k) begin = list.find(',', begin) + 1;
      remote.push_back(endpoint_from_text(list.substr(begin, list.find(',', begin) - begin)));
    } catch (const Error& e) {
      COHORT_LOG(warn) << describe_rank(rank_) << " cannot tell its connection to " << describe_rank(p)
                       << " to abandon it: " << e.what();
    }
  }
  const int shut = shutdown_connections(local, remote);
  COHORT_LOG(debug) << describe_rank(rank_) << " abandons its communicator (" << why << "): " << shut
                    << " connection(s) shut down";
}

void Communicator::fail_aborted(const std::string& where) {
  failed_ = true;
  std::string why;
  {
    std::lock_guard lock(abort_mutex_);
    why = abort_reason_;
  }
  // Peers in a call with this rank fail now too (their reports say who).
  try {
    context_->closeConnections();
  } catch (const std::exception&) {
  }
  throw PeerLostError(where + " on " + describe_rank(rank_) + " was abandoned: " + why, -1);
}

void Communicator::watch_abandoned() {
  std::unique_lock lock(watch_mutex_);
  while (!watch_stop_) {
    lock.unlock();
    std::optional<std::string> why;
    try {
      why = options_.abandoned();
    } catch (const std::exception& e) {
      // The store is gone (the launcher ended): the world's own failures
      // speak for it.
      COHORT_LOG(debug) << "gloo communicator of " << describe_rank(rank_) << " stops watching: " << e.what();
      return;
    }
    if (why) {
      abort(*why);
      return;
    }
    lock.lock();
    watch_cv_.wait_for(lock, options_.abandon_poll, [this] { return watch_stop_; });
  }
}

// ---------------------------------------------------------------------------
// Calls and failures

uint32_t Communicator::begin(Call& call) {
  if (aborted_.load() && !failed_) fail_aborted(call.describe());
  COHORT_CHECK(!failed_) << "the communicator failed earlier; create a new one";
  call.sequence = calls_++;
  const uint64_t h = mix(call.sequence, call.signature());
  return static_cast<uint32_t>(h ^ (h >> 32));
}

template <typename Body>
void Communicator::guarded(const Call& call, Body&& body) {
  if (aborted_.load() && !failed_) fail_aborted(call.describe());
  COHORT_CHECK(!failed_) << "the communicator failed earlier; create a new one";
  try {
    body();
  } catch (const ::gloo::IoException& e) {
    if (aborted_.load()) fail_aborted(call.describe());
    fail_from_gloo(call, e.what(), mentions_timeout(e.what()));
  } catch (const Error&) {
    failed_ = true;
    throw;
  } catch (const std::exception& e) {
    // Gloo's argument checks (EnforceNotMet) and other internal errors.
    failed_ = true;
    COHORT_THROW(Error) << "gloo failed in " << call.describe() << " on " << describe_rank(rank_) << ": "
                        << e.what();
  }
}

std::vector<int> Communicator::broken_peers() {
  // A send on a pair whose connection broke rethrows the pair's error at
  // once; on a healthy pair it only posts a notification nobody will match.
  std::vector<int> broken;
  char byte = 0;
  auto probe = context_->createUnboundBuffer(&byte, 1);
  const uint64_t slot = ::gloo::Slot::build(kProbeSlot, 0);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    try {
      context_->getPair(p)->send(probe.get(), slot, 0, 0);
    } catch (const std::exception&) {
      broken.push_back(p);
    }
  }
  return broken;
}

void Communicator::fail_from_gloo(const Call& call, const std::string& what, bool timed_out) {
  failed_ = true;
  const std::string where =
      call.describe() + (call.collective() ? " (collective #" + std::to_string(call.sequence) + ")" : "");
  const std::string me = describe_rank(rank_);
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) peers.push_back(p);
  std::vector<int> broken = timed_out ? std::vector<int>{} : broken_peers();

  FailureRecord mine;
  mine.kind = timed_out ? FailureRecord::Kind::timeout : FailureRecord::Kind::lost;
  mine.sequence = call.sequence;
  mine.call = call.collective() ? call.describe() : "";
  mine.culprit = broken.empty() ? -1 : options_.world_ranks[broken.front()];
  mine.message = timed_out ? where + " timed out on " + me + " after " + seconds_text(options_.timeout)
                           : me + " lost its connection to " +
                                 (broken.empty() ? std::string("a peer") : describe_rank(broken.front())) +
                                 " during " + where + ": " + what;
  report_->publish(mine);
  // Fail the whole group now rather than at everyone's timeout.
  try {
    context_->closeConnections();
  } catch (const std::exception&) {
  }
  auto records = report_->collect(timed_out || broken.empty() ? peers : broken);
  // A peer that only lost a connection too names the rank it blames: read
  // that one's account as well (its connection to us may not have broken
  // yet when we looked).
  std::vector<int> blamed;
  for (const auto& [p, r] : records)
    if (r.kind == FailureRecord::Kind::lost && r.culprit >= 0) {
      const auto it = std::find(options_.world_ranks.begin(), options_.world_ranks.end(), r.culprit);
      const int q = int(it - options_.world_ranks.begin());
      if (it != options_.world_ranks.end() && q != rank_ && !records.count(q)) blamed.push_back(q);
    }
  if (!blamed.empty()) records.merge(report_->collect(blamed));
  // A peer that timed out waited for someone: hear the other peers too, so
  // that this rank names the ranks that never answered, as that peer does.
  // (Its own record cannot: it is written before it hears from anyone.)
  const bool peer_timed_out = std::any_of(records.begin(), records.end(), [](const auto& pr) {
    return pr.second.kind == FailureRecord::Kind::timeout;
  });
  if (!timed_out && peer_timed_out) {
    std::vector<int> unheard;
    for (int p : peers)
      if (!records.count(p)) unheard.push_back(p);
    records.merge(report_->collect(unheard));
  }
  // What `ranks` reported, for a timeout: "; ranks that reported no failure
  // (...): 2, 3; timed out as well: ranks 1" and the losses they saw.
  auto accounts = [&](std::span<const int> ranks) {
    std::string silent, also, lost;
    auto add = [this](std::string& list, int p) {
      list += (list.empty() ? "" : ", ") + std::to_string(options_.world_ranks[p]);
    };
    for (int p : ranks) {
      auto it = records.find(p);
      if (it == records.end())
        add(silent, p);
      else if (it->second.kind == FailureRecord::Kind::timeout)
        add(also, p);
      else
        lost += "; " + it->second.message;
    }
    return (silent.empty() ? "" : "; ranks that reported no failure (not in this call yet, or hung): " + silent) +
           (also.empty() ? "" : "; timed out as well: ranks " + also) + lost;
  };

  // 1. Disagreement: a peer saw a mismatch, or two ranks failed in different
  // calls as the same collective. Ranks failing in different collectives
  // are no evidence of one: ranks that disagree all wait in the first
  // collective they disagree on, while a rank lost mid-collective lets a
  // peer whose part was done go on to the next one as another still waits.
  std::map<uint64_t, std::pair<int, std::string>> called;  // sequence -> a rank and its call
  if (call.collective()) called.emplace(call.sequence, std::pair{rank_, mine.call});
  for (const auto& [p, r] : records) {
    if (r.kind == FailureRecord::Kind::mismatch) throw MismatchError(r.message);
    const bool in_call = r.kind == FailureRecord::Kind::timeout || r.kind == FailureRecord::Kind::lost;
    if (!in_call || r.call.empty()) continue;
    const auto [it, first] = called.emplace(r.sequence, std::pair{p, r.call});
    if (!first && it->second.second != r.call)
      throw MismatchError("ranks disagree on the collective: " + describe_rank(it->second.first) + " called " +
                          it->second.second + " as collective #" + std::to_string(r.sequence) + " but " +
                          describe_rank(p) + " called " + r.call + " as collective #" + std::to_string(r.sequence));
  }
  // 2. A peer that left on an exception.
  for (const auto& [p, r] : records)
    if (r.kind == FailureRecord::Kind::left)
      throw PeerLostError(describe_rank(p) + " left during " + where + " on " + me + ": " + r.message,
                          options_.world_ranks[p], "", r.message);
  // 3. Our own timeout: name the ranks that never showed up.
  if (timed_out)
    throw TimeoutError(where + " timed out after " + seconds_text(options_.timeout) + " on " + me + accounts(peers));
  // 4. A peer that timed out, which closed its connections: whom it waited for.
  for (const auto& [p, r] : records)
    if (r.kind == FailureRecord::Kind::timeout) {
      std::vector<int> others;
      for (int q : peers)
        if (q != p) others.push_back(q);
      throw TimeoutError(r.message + accounts(others) + "; " + me + " was in " + where);
    }
  // 5. A lost connection: a peer that wrote nothing died or is unreachable.
  for (int p : blamed)
    if (!records.count(p)) broken.insert(broken.begin(), p);
  for (int p : broken)
    if (!records.count(p))
      throw PeerLostError(describe_rank(p) + " died or became unreachable during " + where + " on " + me + " (" +
                              what + ")",
                          options_.world_ranks[p]);
  for (int p : broken) {
    const FailureRecord& r = records.at(p);
    throw PeerLostError(r.message + " (seen by " + me + " through " + describe_rank(p) + " during " + where + ")",
                        r.culprit >= 0 ? r.culprit : options_.world_ranks[p], "", r.message);
  }
  throw PeerLostError(where + " failed on " + me + ": " + what, -1);
}

void Communicator::fail_mismatch(const Call& call, const std::string& message) {
  failed_ = true;
  report_->publish({FailureRecord::Kind::mismatch, call.sequence, "", options_.world_ranks[call.root], message});
  try {
    context_->closeConnections();
  } catch (const std::exception&) {
  }
  throw MismatchError(message);
}

// ---------------------------------------------------------------------------
// Collectives

void Communicator::allreduce(BufferView send, BufferView recv, const AllreduceOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count) << "allreduce send and recv counts differ";
  COHORT_CHECK(send.dtype == recv.dtype) << "allreduce send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "allreduce");
  if (average_needs_f32(send.dtype, options.op)) return allreduce_average_in_f32(*this, send, recv);
  Call call{Kind::allreduce, send.dtype, send.count, uint8_t(options.op)};
  const uint32_t tag = begin(call);
  if (send.count == 0) return;
  guarded(call, [&] {
    const DType dtype = send.dtype;
    const ReduceOp op = options.op, partial = partial_op(op);
    ::gloo::AllreduceOptions o(context_);
    with_element_type(dtype, [&](auto zero) {
      using T = decltype(zero);
      if (send.data != recv.data) o.setInput<T>(static_cast<T*>(send.data), send.count);
      o.setOutput<T>(static_cast<T*>(recv.data), recv.count);
    });
    // Gloo calls fn(c, a, b, n) with c == a when it accumulates; cohort's
    // kernels allow only the first source to alias the destination, and
    // every op is commutative, so swap when Gloo aliases the second.
    o.setReduceFunction([dtype, partial](void* c, const void* a, const void* b, size_t n) {
      if (c == b && c != a) std::swap(a, b);
      reduce2(partial, dtype, c, a, b, n);
    });
    o.setAlgorithm(send.bytes() <= options_.bcube_max_bytes ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                                                            : ::gloo::AllreduceOptions::Algorithm::RING);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::allreduce(o);
    if (op == ReduceOp::avg) finish_average(dtype, recv.data, recv.count, size_);
  });
}

void Communicator::broadcast(BufferView buffer, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "broadcast root " << root << " outside [0, " << size_ << ")";
  Call call{Kind::broadcast, buffer.dtype, buffer.count, kNoOp, root};
  const uint32_t tag = begin(call);
  if (buffer.count == 0 || size_ == 1) return;
  guarded(call, [&] {
    ::gloo::BroadcastOptions o(context_);
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(buffer.data), buffer.bytes());
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::broadcast(o);
  });
}

void Communicator::allgather(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(recv.count, send.count * size_) << "allgather recv must hold size() sends";
  COHORT_CHECK(send.dtype == recv.dtype) << "allgather send and recv dtypes differ";
  const bool in_place = send.data == at(recv, send.count * rank_);
  if (!in_place) check_no_partial_overlap(send, recv, "allgather");
  Call call{Kind::allgather, send.dtype, send.count};
  const uint32_t tag = begin(call);
  if (send.count == 0) return;
  guarded(call, [&] {
    if (size_ == 1) {
      if (!in_place) std::memmove(recv.data, send.data, send.bytes());
      return;
    }
    ::gloo::AllgatherOptions o(context_);
    if (!in_place) o.setInput<uint8_t>(reinterpret_cast<uint8_t*>(send.data), send.bytes());
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), recv.bytes());
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::allgather(o);
  });
}

void Communicator::allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) {
  COHORT_CHECK_EQ(counts.size(), size_t(size_)) << "allgatherv needs one count per rank";
  COHORT_CHECK_EQ(send.count, counts[rank_]) << "allgatherv send count differs from counts[rank]";
  COHORT_CHECK(send.dtype == recv.dtype) << "allgatherv send and recv dtypes differ";
  const auto displ = displacements(counts);
  COHORT_CHECK_EQ(recv.count, displ.back()) << "allgatherv recv must hold the sum of counts";
  const bool in_place = send.data == at(recv, displ[rank_]);
  if (!in_place) check_no_partial_overlap(send, recv, "allgatherv");
  uint64_t counts_hash = 0;
  for (size_t c : counts) counts_hash = mix(counts_hash, c);
  Call call{Kind::allgatherv, send.dtype, displ.back(), kNoOp, -1, counts_hash};
  const uint32_t tag = begin(call);
  if (displ.back() == 0) return;
  guarded(call, [&] {
    if (size_ == 1) {
      if (!in_place) std::memmove(recv.data, send.data, send.bytes());
      return;
    }
    const size_t es = dtype_size(send.dtype);
    std::vector<size_t> bytes(counts.begin(), counts.end());
    for (size_t& b : bytes) b *= es;
    ::gloo::AllgathervOptions o(context_);
    if (!in_place) o.setInput<uint8_t>(reinterpret_cast<uint8_t*>(send.data), send.bytes());
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), std::move(bytes));
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::allgatherv(o);
  });
}

void Communicator::reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options) {
  COHORT_CHECK_EQ(send.count, recv.count * size_) << "reduce_scatter send must hold size() recv blocks";
  COHORT_CHECK(send.dtype == recv.dtype) << "reduce_scatter send and recv dtypes differ";
  check_no_partial_overlap(send, recv, "reduce_scatter");
  if (average_needs_f32(recv.dtype, options.op)) return reduce_scatter_average_in_f32(*this, send, recv);
  Call call{Kind::reduce_scatter, recv.dtype, recv.count, uint8_t(options.op)};
  const uint32_t tag = begin(call);
  if (recv.count == 0) return;
  guarded(call, [&] { reduce_scatter_ring(send, recv, options.op, tag); });
}

// Ring reduce-scatter, chunk by chunk: in step s rank r sends the partial
// reduction of block (r - s - 1) to rank r + 1 and receives that of block
// (r - s - 2) from rank r - 1, adding its own contribution before passing it
// on; after size() - 1 steps the partial of block r holds every rank's.
// Sends and receives of a step overlap; memory is four chunks.
void Communicator::reduce_scatter_ring(BufferView send, BufferView recv, ReduceOp op, uint32_t tag) {
  const int n = size_;
  const DType dtype = recv.dtype;
  const size_t es = dtype_size(dtype);
  const size_t block = recv.count;
  if (n == 1) {
    if (send.data != recv.data) std::memmove(recv.data, send.data, recv.bytes());
    return;
  }
  const size_t chunk = std::max<size_t>(1, std::min(block, options_.chunk_bytes / es));
  const int next = (rank_ + 1) % n;
  const int prev = (rank_ + n - 1) % n;
  const uint64_t slot = ::gloo::Slot::build(kReduceScatterSlot, tag);
  std::vector<std::byte> storage(4 * chunk * es);
  std::byte* incoming[2] = {storage.data(), storage.data() + chunk * es};
  std::byte* outgoing[2] = {storage.data() + 2 * chunk * es, storage.data() + 3 * chunk * es};
  auto in_buf = context_->createUnboundBuffer(storage.data(), 2 * chunk * es);
  std::unique_ptr<::gloo::transport::UnboundBuffer> out_buf[2] = {
      context_->createUnboundBuffer(outgoing[0], chunk * es), context_->createUnboundBuffer(outgoing[1], chunk * es)};
  auto own = context_->createUnboundBuffer(send.data, send.bytes());
  bool out_pending[2] = {false, false};
  int own_pending = 0;
  auto block_of = [n](int r, int s) { return ((r - s) % n + n) % n; };

  for (size_t off = 0; off < block; off += chunk) {
    const size_t len = std::min(chunk, block - off);
    const size_t bytes = len * es;
    for (int s = 0; s < n - 1; ++s) {
      in_buf->recv(prev, slot, size_t(s & 1) * chunk * es, bytes);
      if (s == 0) {
        own->send(next, slot, (size_t(block_of(rank_, 1)) * block + off) * es, bytes);
        ++own_pending;
      } else {
        // Received in step s - 1: the partial of block (r - s - 1), which
        // this step forwards with our contribution added.
        in_buf->waitRecv(options_.timeout);
        std::byte* out = outgoing[s & 1];
        if (out_pending[s & 1]) {
          out_buf[s & 1]->waitSend(options_.timeout);
          out_pending[s & 1] = false;
        }
        reduce2(partial_op(op), dtype, out, incoming[(s - 1) & 1],
                at(send, size_t(block_of(rank_, s + 1)) * block + off), len);
        out_buf[s & 1]->send(next, slot, 0, bytes);
        out_pending[s & 1] = true;
      }
    }
    // The last partial received is block r's, missing only us. In place,
    // recv is block 0 of send: our block sent in step 0 must be out before
    // the result overwrites it, and the result may alias only the first
    // source.
    in_buf->waitRecv(options_.timeout);
    for (; own_pending > 0; --own_pending) own->waitSend(options_.timeout);
    reduce2(partial_op(op), dtype, at(recv, off), at(send, size_t(rank_) * block + off), incoming[(n - 2) & 1], len);
  }
  for (int k = 0; k < 2; ++k)
    if (out_pending[k]) out_buf[k]->waitSend(options_.timeout);
  if (op == ReduceOp::avg) finish_average(dtype, recv.data, recv.count, n);
}

void Communicator::alltoall(BufferView send, BufferView recv) {
  COHORT_CHECK_EQ(send.count, recv.count) << "alltoall send and recv counts differ";
  COHORT_CHECK_EQ(send.count % size_, size_t(0)) << "alltoall count must divide by size()";
  COHORT_CHECK(send.dtype == recv.dtype) << "alltoall send and recv dtypes differ";
  COHORT_CHECK(send.data != recv.data || size_ == 1 || send.count == 0) << "alltoall cannot run in place";
  check_no_partial_overlap(send, recv, "alltoall");
  Call call{Kind::alltoall, send.dtype, send.count};
  const uint32_t tag = begin(call);
  if (send.count == 0) return;
  guarded(call, [&] {
    if (size_ == 1) {
      if (send.data != recv.data) std::memmove(recv.data, send.data, send.bytes());
      return;
    }
    ::gloo::AlltoallOptions o(context_);
    o.setInput<uint8_t>(reinterpret_cast<uint8_t*>(send.data), send.bytes());
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), recv.bytes());
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::alltoall(o);
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
  Call call{Kind::alltoallv, send.dtype, 0};
  const uint32_t tag = begin(call);
  guarded(call, [&] {
    const size_t es = dtype_size(send.dtype);
    if (size_ == 1) {
      std::memmove(recv.data, send.data, send_counts[0] * es);
      return;
    }
    // Agree on the block sizes first: a block longer than its receiver
    // expects would overrun the receiver's buffer inside Gloo.
    std::vector<int64_t> promised(send_counts.begin(), send_counts.end()), announced(size_);
    ::gloo::AlltoallOptions exchange(context_);
    exchange.setInput<int64_t>(promised.data(), promised.size());
    exchange.setOutput<int64_t>(announced.data(), announced.size());
    exchange.setTag(tag ^ 1u);
    exchange.setTimeout(options_.timeout);
    ::gloo::alltoall(exchange);
    for (int p = 0; p < size_; ++p)
      if (uint64_t(announced[p]) != recv_counts[p]) {
        Call blame = call;
        blame.root = p;
        fail_mismatch(blame, "alltoallv mismatch: " + describe_rank(p) + " sends " + std::to_string(announced[p]) +
                                 " elements to " + describe_rank(rank_) + ", which expects " +
                                 std::to_string(recv_counts[p]));
      }
    std::vector<int64_t> sbytes(size_), rbytes(size_);
    for (int p = 0; p < size_; ++p) {
      sbytes[p] = int64_t(send_counts[p] * es);
      rbytes[p] = int64_t(recv_counts[p] * es);
    }
    ::gloo::AlltoallvOptions o(context_);
    o.setInput<uint8_t>(reinterpret_cast<uint8_t*>(send.data), std::move(sbytes));
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), std::move(rbytes));
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::alltoallv(o);
  });
}

void Communicator::gather(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "gather root " << root << " outside [0, " << size_ << ")";
  if (rank_ == root) {
    COHORT_CHECK_EQ(recv.count, send.count * size_) << "gather recv must hold size() sends on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "gather send and recv dtypes differ";
  }
  Call call{Kind::gather, send.dtype, send.count, kNoOp, root};
  const uint32_t tag = begin(call);
  if (send.count == 0) return;
  guarded(call, [&] {
    std::byte* own = rank_ == root ? at(recv, send.count * root) : nullptr;
    if (size_ == 1) {
      if (own != send.data) std::memmove(own, send.data, send.bytes());
      return;
    }
    ::gloo::GatherOptions o(context_);
    o.setInput<uint8_t>(reinterpret_cast<uint8_t*>(send.data), send.bytes());
    if (rank_ == root) o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), recv.bytes());
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::gather(o);
  });
}

void Communicator::scatter(BufferView send, BufferView recv, int root) {
  COHORT_CHECK(root >= 0 && root < size_) << "scatter root " << root << " outside [0, " << size_ << ")";
  if (rank_ == root) {
    COHORT_CHECK_EQ(send.count, recv.count * size_) << "scatter send must hold size() blocks on the root";
    COHORT_CHECK(send.dtype == recv.dtype) << "scatter send and recv dtypes differ";
  }
  Call call{Kind::scatter, recv.dtype, recv.count, kNoOp, root};
  const uint32_t tag = begin(call);
  if (recv.count == 0) return;
  guarded(call, [&] {
    const size_t block = recv.bytes();
    if (size_ == 1) {
      if (send.data != recv.data) std::memmove(recv.data, send.data, block);
      return;
    }
    ::gloo::ScatterOptions o(context_);
    if (rank_ == root) {
      std::vector<uint8_t*> blocks(size_);
      for (int p = 0; p < size_; ++p) blocks[p] = reinterpret_cast<uint8_t*>(send.byte_data() + size_t(p) * block);
      o.setInputs<uint8_t>(blocks, block);
    }
    o.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(recv.data), block);
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::scatter(o);
  });
}

void Communicator::barrier() {
  Call call{Kind::barrier};
  const uint32_t tag = begin(call);
  if (size_ == 1) return;
  guarded(call, [&] {
    ::gloo::BarrierOptions o(context_);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    ::gloo::barrier(o);
  });
}

// ---------------------------------------------------------------------------
// Point to point

void Communicator::reap_outgoing(int peer, size_t keep) {
  auto& queue = outgoing_[peer];
  while (queue.size() > keep) {
    queue.front()->buffer->waitSend(options_.timeout);
    spare_.push_back(std::move(queue.front()));
    queue.pop_front();
  }
}

void Communicator::send(BufferView buffer, int dst, uint32_t tag) {
  COHORT_CHECK(dst >= 0 && dst < size_ && dst != rank_) << "send to rank " << dst << " from rank " << rank_;
  Call call{Kind::send, buffer.dtype, buffer.count, kNoOp, dst, 0, tag, calls_};
  guarded(call, [&] {
    // Keep at most eager_window messages in flight to one peer.
    reap_outgoing(dst, size_t(std::max(1, options_.eager_window)) - 1);
    std::unique_ptr<Outgoing> out;
    if (!spare_.empty()) {
      out = std::move(spare_.back());
      spare_.pop_back();
    } else {
      out = std::make_unique<Outgoing>();
      out->bytes.resize(sizeof(MessageHeader) + options_.eager_bytes);
      out->buffer = context_->createUnboundBuffer(out->bytes.data(), out->bytes.size());
    }
    const size_t bytes = buffer.bytes();
    const bool eager = bytes <= options_.eager_bytes;
    const MessageHeader header{kHeaderMagic, tag, uint32_t(buffer.dtype), eager ? 1u : 0u, buffer.count, bytes};
    std::memcpy(out->bytes.data(), &header, sizeof header);
    if (eager && bytes) std::memcpy(out->bytes.data() + sizeof header, buffer.data, bytes);
    const uint64_t slot = ::gloo::Slot::build(kPointToPointSlot, 0);
    out->buffer->send(dst, slot, 0, sizeof header + (eager ? bytes : 0));
    outgoing_[dst].push_back(std::move(out));
    if (!eager) {
      // The payload follows the header in the same (ordered) slot; the
      // caller may reuse its buffer once it is out.
      auto payload = context_->createUnboundBuffer(buffer.data, bytes);
      payload->send(dst, slot);
      payload->waitSend(options_.timeout);
    }
  });
}

void Communicator::recv(BufferView buffer, int src, uint32_t tag) {
  COHORT_CHECK(src >= 0 && src < size_ && src != rank_) << "recv from rank " << src << " on rank " << rank_;
  Call call{Kind::recv, buffer.dtype, buffer.count, kNoOp, src, 0, tag, calls_};
  guarded(call, [&] {
    const uint64_t slot = ::gloo::Slot::build(kPointToPointSlot, 0);
    header_in_buffer_->recv(src, slot, 0, header_in_.size());
    header_in_buffer_->waitRecv(options_.timeout);
    MessageHeader h;
    std::memcpy(&h, header_in_.data(), sizeof h);
    if (h.magic != kHeaderMagic || h.tag != tag || h.dtype != uint32_t(buffer.dtype) || h.count != buffer.count) {
      std::ostringstream os;
      os << "point-to-point mismatch: " << describe_rank(rank_) << " expected tag " << tag << ", " << buffer.count
         << ' ' << dtype_name(buffer.dtype) << " from " << describe_rank(src) << ", which sent tag " << h.tag << ", "
         << h.count << ' ' << (h.dtype <= uint32_t(DType::i64) ? dtype_name(DType(h.dtype)) : "?");
      fail_mismatch(call, os.str());
    }
    if (h.eager) {
      if (h.bytes) std::memcpy(buffer.data, header_in_.data() + sizeof h, h.bytes);
    } else {
      auto payload = context_->createUnboundBuffer(buffer.data, h.bytes);
      payload->recv(src, slot);
      payload->waitRecv(options_.timeout);
    }
  });
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
  // The sub-group shares this rank's device (one listening address and one
  // event loop thread per process) but has its own connections and slots.
  return std::unique_ptr<comm::Communicator>(
      new Communicator(std::move(store), new_rank, int(members.size()), std::move(sub), device_));
}

}  // namespace cohort::comm::gloo
