#include "cohort/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/common/logging.h"
#include "cohort/engine/autotune.h"
#include "cohort/engine/cycle_state.h"
#include "cohort/engine/doorbell.h"
#include "cohort/engine/executor.h"
#include "cohort/engine/negotiation.h"
#include "cohort/engine/request.h"
#include "cohort/engine/stall_inspector.h"
#include "cohort/engine/timeline.h"
#include "cohort/engine/wire.h"

namespace cohort::engine {
namespace {

// ---------------------------------------------------------------------------
// The failure record in the store: the root cause every rank reports.

enum class FailureKind : int { error = 0, mismatch = 1, timeout = 2, peer_lost = 3 };

struct Failure {
  FailureKind kind = FailureKind::error;
  int lost_rank = -1;  // PeerLostError's rank
  std::string message;
};

std::string encode(const Failure& f) {
  return std::to_string(int(f.kind)) + "\n" + std::to_string(f.lost_rank) + "\n" + f.message;
}

Failure decode(const std::string& s) {
  Failure f;
  const size_t a = s.find('\n');
  const size_t b = a == std::string::npos ? a : s.find('\n', a + 1);
  if (b == std::string::npos) {
    f.message = s;
    return f;
  }
  try {
    f.kind = static_cast<FailureKind>(std::stoi(s.substr(0, a)));
    f.lost_rank = std::stoi(s.substr(a + 1, b - a - 1));
  } catch (const std::exception&) {
  }
  f.message = s.substr(b + 1);
  return f;
}

std::exception_ptr to_exception(const Failure& f) {
  switch (f.kind) {
    case FailureKind::mismatch: return std::make_exception_ptr(MismatchError(f.message));
    case FailureKind::timeout: return std::make_exception_ptr(TimeoutError(f.message));
    case FailureKind::peer_lost: return std::make_exception_ptr(PeerLostError(f.message, f.lost_rank));
    case FailureKind::error: break;
  }
  return std::make_exception_ptr(Error(f.message));
}

// The kind and text of an exception caught on the engine thread.
Failure classify(std::exception_ptr e) {
  Failure f;
  try {
    std::rethrow_exception(e);
  } catch (const MismatchError& x) {
    f = {FailureKind::mismatch, -1, x.what()};
  } catch (const TimeoutError& x) {
    f = {FailureKind::timeout, -1, x.what()};
  } catch (const PeerLostError& x) {
    f = {FailureKind::peer_lost, x.rank(), x.what()};
  } catch (const std::exception& x) {
    f = {FailureKind::error, -1, x.what()};
  } catch (...) {
    f = {FailureKind::error, -1, "unknown exception"};
  }
  return f;
}

// ---------------------------------------------------------------------------
// Counters (and the settings in force) readable from any thread; written by
// the engine thread only.

struct Counters {
  // clang-format 14 reflows this list differently on each run:
  // clang-format off
#define COHORT_ENGINE_COUNTERS(X)                                                             \
  X(cycles) X(negotiations) X(cache_hits) X(cache_misses) X(ops_completed) X(ops_failed)      \
  X(fused_ops) X(fusion_groups) X(bytes) X(sleeps) X(rings) X(mismatches) X(stall_warnings) \
  X(negotiation_ns) X(execution_ns) X(tuning_changes) X(fusion_threshold_bytes) X(cycle_time_us)
  // clang-format on
#define X(name) std::atomic<uint64_t> name{0};
  COHORT_ENGINE_COUNTERS(X)
#undef X
  EngineStats snapshot() const {
    EngineStats s;
#define X(name) s.name = name.load(std::memory_order_relaxed);
    COHORT_ENGINE_COUNTERS(X)
#undef X
    return s;
  }
};

void add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

// A tuner's setting, for the log.
std::string describe(const AutotuneParams& p) {
  std::ostringstream os;
  if (p.bucket_bytes > 0) os << "bucket cap " << p.bucket_bytes << " B, ";
  os << "fusion threshold " << p.fusion_threshold_bytes << " B, cycle time " << p.cycle_time_us << " us";
  return os.str();
}

uint64_t ns(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// ---------------------------------------------------------------------------
// Timeline paths: one file per engine; a second engine in the same process
// asking for a path already taken gets "<stem>.<label>.<n><ext>".

std::mutex g_paths_mutex;
std::set<std::string> g_paths;

std::string claim_path(const std::string& path, const std::string& label, uint64_t generation) {
  std::lock_guard lock(g_paths_mutex);
  std::string p = path;
  if (g_paths.contains(p)) {
    const size_t slash = path.find_last_of('/');
    const size_t dot = path.find_last_of('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    std::string safe;
    for (char c : label) safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    const std::string stem = has_ext ? path.substr(0, dot) : path;
    const std::string ext = has_ext ? path.substr(dot) : "";
    p = stem + "." + safe + "." + std::to_string(generation) + ext;
  }
  g_paths.insert(p);
  return p;
}

void release_path(const std::string& path) {
  std::lock_guard lock(g_paths_mutex);
  g_paths.erase(path);
}

// ---------------------------------------------------------------------------
// Argument checks at submission.

void check_buffer(const BufferView& v, const std::string& name, const char* which) {
  COHORT_CHECK(v.data != nullptr || v.count == 0) << "op '" << name << "': " << which << " buffer is null";
}

void check_no_partial_overlap(const BufferView& a, const BufferView& b, const std::string& name) {
  if (a.data == b.data || a.bytes() == 0 || b.bytes() == 0) return;
  const auto* a0 = a.byte_data();
  const auto* b0 = b.byte_data();
  COHORT_CHECK(a0 + a.bytes() <= b0 || b0 + b.bytes() <= a0)
      << "op '" << name << "': input and output overlap without being the same buffer";
}

void check_shape(const std::vector<int64_t>& shape, size_t count, const std::string& name) {
  if (shape.empty()) return;
  COHORT_CHECK_LE(shape.size(), kMaxShapeDims) << "op '" << name << "': too many dimensions";
  int64_t product = 1;
  for (int64_t d : shape) {
    COHORT_CHECK_GE(d, 0) << "op '" << name << "': negative dimension";
    product *= d;
  }
  COHORT_CHECK_EQ(uint64_t(product), uint64_t(count)) << "op '" << name << "': shape does not match the element count";
}

void check_scales(DType dtype, double prescale, double postscale, const std::string& name) {
  COHORT_CHECK(is_floating(dtype) || (prescale == 1.0 && postscale == 1.0))
      << "op '" << name << "': prescale/postscale need a floating dtype, not " << dtype_name(dtype);
}

template <typename P>
P non_null(P p, const char* what) {
  COHORT_CHECK(p != nullptr) << "Engine needs " << what;
  return p;
}

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

}  // namespace

// ---------------------------------------------------------------------------

struct Engine::Impl {
  Impl(std::shared_ptr<comm::Communicator> c, std::shared_ptr<rendezvous::Store> s, EngineOptions o);
  ~Impl();

  // Any thread.
  Handle submit(std::unique_ptr<Request> r);
  std::unique_ptr<Request> make_request(std::string name, bool ordered, OpMeta meta, BufferView in, BufferView out);
  void ring();
  void ring_self();  // engine thread
  void abort_if_abandoned();  // engine thread: opt.abandoned's reason becomes an abort
  void request_shutdown();
  void request_abort(const std::string& message);
  void wait_stopped();

  // Engine thread.
  enum class Outcome { busy, idle, sleep, stop };
  void run();
  Outcome run_cycle();
  bool sleep();  // false: the engine stopped while asleep
  bool has_pending_requests() const;
  void complete_group(std::span<Work* const> group);
  void emit_timeline(const Request& r, const Work& w);
  void stall_pass(Clock::time_point now);
  void stall_check(Clock::time_point now);
  void publish_failure(const Failure& f);
  std::exception_ptr recorded_failure(const std::optional<Failure>& fallback);
  void stop_with(std::exception_ptr error);
  bool has_local_work();

  // Set at construction.
  std::shared_ptr<comm::Communicator> comm;
  std::shared_ptr<rendezvous::Store> store;
  EngineOptions opt;
  int rank = 0;
  int size = 1;
  uint64_t generation = 0;
  std::string prefix;
  std::string error_key;
  std::string label;

  // Shared with submitters, under `mutex`.
  std::mutex mutex;
  std::vector<std::unique_ptr<Request>> incoming;
  std::unordered_set<std::string> in_flight;
  uint64_t unnamed_barriers = 0;
  std::shared_ptr<HandleState> join_state;
  bool shutdown_requested = false;
  std::optional<Failure> abort_request;
  bool stopped = false;
  std::exception_ptr stopped_error;

  std::unique_ptr<Doorbell> doorbell;
  Counters counters;
  std::mutex join_thread_mutex;

  // Engine thread only.
  Negotiator negotiator;
  Executor executor;
  StallInspector inspector;
  std::unique_ptr<Timeline> timeline;
  std::unordered_map<std::string, std::unique_ptr<Request>> named;
  std::vector<Request*> by_slot;
  std::deque<std::unique_ptr<Request>> ordered;
  bool joined = false;
  std::vector<std::unique_ptr<Request>> collected;
  std::vector<uint64_t> record, records;
  std::string payload_body, payload;
  uint32_t payload_entries = 0;
  std::vector<std::byte> payloads_recv;
  std::vector<size_t> payload_counts;
  std::vector<CycleStateView> views;
  std::vector<std::span<const std::byte>> payload_spans;
  Decision decision;
  std::vector<Work> work;
  std::vector<std::pair<std::unique_ptr<Request>, std::exception_ptr>> finished;
  uint64_t cycle = 0;
  uint64_t epoch = 0;
  Clock::time_point last_busy{}, last_pass{};
  bool abandonment_seen = false;  // a liveness probe found opt.abandoned's reason
  Clock::time_point cycle_started{};
  // The parameters this cycle runs with (rank 0's, agreed in the records);
  // the autotuner and its step clock on rank 0 (autotune.h). The tuner is
  // fed by the engine's thread (its own step clock) or, once a wrapper
  // drives the steps (tune_step), by that wrapper's thread: tune_mutex
  // guards it, the clock, the driver and the step marks. What the records
  // carry is published in atomics, and whether the engine's own clock still
  // feeds the tuner: the engine thread reads them every cycle and every
  // completed op without the lock.
  std::chrono::microseconds cycle_time{0};
  bool autotuning = false;  // rank 0 and COHORT_AUTOTUNE: tuner is set
  std::mutex tune_mutex;
  std::unique_ptr<Autotuner> tuner;
  StepClock step_clock;
  const void* tune_driver = nullptr;  // tune_step()'s caller, once one drives the steps
  Clock::time_point last_step_mark{};
  std::atomic<int64_t> tuned_fusion_threshold{0}, tuned_cycle_time_us{0};
  std::atomic<bool> own_step_clock{false};
  void autotune_observe(const Request& r);
  // tune_mutex held: one step's time to the tuner, logged; the CSV of the
  // trials when the search converged with it, for the caller to write once
  // it let go of the lock.
  std::optional<std::string> autotune_on_step(double seconds);
  void publish_tuning();  // tune_mutex held
  void write_autotune_log(const std::string& csv) const;

  std::thread thread;
};

Engine::Impl::Impl(std::shared_ptr<comm::Communicator> c, std::shared_ptr<rendezvous::Store> s, EngineOptions o)
    : comm(non_null(std::move(c), "a communicator")),
      store(non_null(std::move(s), "a store")),
      opt(o.resolve()),
      rank(comm->rank()),
      size(comm->size()),
      label(opt.label),
      negotiator(comm->size(), static_cast<size_t>(opt.cache_capacity)),
      executor(*comm, static_cast<size_t>(opt.fusion_threshold_bytes)),
      inspector(opt.stall_warning_s, opt.stall_shutdown_s) {
  // A fresh key space per engine instance, agreed through the communicator,
  // so that keys left by an earlier engine on the same namespace (a bell, an
  // error record) cannot reach this one.
  // Rank 0 also opens the timeline first, so that a bad path fails every
  // rank's constructor (generation -1) rather than leaving them waiting.
  int64_t gen = 0;
  std::exception_ptr setup_error;
  if (rank == 0) {
    try {
      gen = store->add("engine_generation", 1);
      if (!opt.timeline_path->empty()) {
        const std::string path = claim_path(*opt.timeline_path, label, uint64_t(gen));
        try {
          timeline = std::make_unique<Timeline>(path, rank, label);
        } catch (...) {
          release_path(path);
          throw;
        }
      }
    } catch (...) {
      setup_error = std::current_exception();
      gen = -1;
    }
  }
  comm->broadcast(BufferView{&gen, 1, DType::i64}, 0);
  if (setup_error) std::rethrow_exception(setup_error);
  COHORT_CHECK_AS(ConfigError, gen > 0) << "engine '" << label << "': rank 0 failed to start its engine (see its log)";
  generation = static_cast<uint64_t>(gen);
  prefix = "g" + std::to_string(generation) + "/";
  error_key = prefix + "error";
  doorbell = std::make_unique<Doorbell>(store, prefix);
  cycle_time = opt.cycle_time;
  counters.fusion_threshold_bytes = executor.fusion_threshold();
  counters.cycle_time_us = uint64_t(cycle_time.count());
  autotuning = rank == 0 && opt.autotune;
  if (autotuning) {
    tuner = std::make_unique<Autotuner>(
        AutotuneParams{opt.fusion_threshold_bytes, int64_t(opt.cycle_time.count())});
    publish_tuning();
    own_step_clock = true;
  }
  last_busy = last_pass = Clock::now();
  thread = std::thread([this] { run(); });
}

Engine::Impl::~Impl() {
  if (timeline) {
    const std::string path = timeline->path();
    timeline.reset();
    release_path(path);
  }
}

// ---------------------------------------------------------------------------
// Submission side.

void Engine::Impl::ring() {
  try {
    if (doorbell->ring_if_sleeping()) add(counters.rings);
  } catch (const std::exception& e) {
    // The engine thread meets the same store failure and fails the handles.
    COHORT_LOG(error) << "engine '" << label << "': cannot ring the doorbell: " << e.what();
  }
}

std::unique_ptr<Request> Engine::Impl::make_request(std::string name, bool is_ordered, OpMeta meta, BufferView in,
                                                    BufferView out) {
  if (!is_ordered) {
    COHORT_CHECK(!name.empty()) << "an engine op needs a name";
    COHORT_CHECK_LE(name.size(), kMaxNameBytes) << "op name too long";
  }
  auto r = std::make_unique<Request>();
  r->state = std::make_shared<HandleState>(is_ordered ? std::string("ordered ") + std::string(op_kind_name(meta.kind))
                                                      : name);
  r->name = std::move(name);
  r->ordered = is_ordered;
  r->meta = std::move(meta);
  r->in = in;
  r->out = out;
  return r;
}

Handle Engine::Impl::submit(std::unique_ptr<Request> r) {
  auto state = r->state;
  {
    std::lock_guard lock(mutex);
    if (stopped) {
      state->fail(stopped_error);
      return Handle(state);
    }
    COHORT_CHECK(!join_state) << "rank " << rank << " is inside join() on engine '" << label
                              << "': it cannot submit '" << state->name() << "' until every rank has joined";
    if (!r->ordered) {
      COHORT_CHECK(in_flight.insert(r->name).second)
          << "op '" << r->name << "' is already in flight on rank " << rank
          << "; wait for its handle before submitting the name again";
    }
    r->submitted = Clock::now();
    incoming.push_back(std::move(r));
  }
  ring();
  return Handle(state);
}

void Engine::Impl::request_shutdown() {
  {
    std::lock_guard lock(mutex);
    if (stopped) return;
    shutdown_requested = true;
  }
  ring();
}

void Engine::Impl::request_abort(const std::string& message) {
  {
    std::lock_guard lock(mutex);
    if (stopped) return;
    if (!abort_request)
      abort_request = Failure{FailureKind::error, -1, "rank " + std::to_string(rank) + " aborted: " + message};
  }
  ring();
}

void Engine::Impl::wait_stopped() {
  std::lock_guard lock(join_thread_mutex);
  if (thread.joinable()) thread.join();
}

// ---------------------------------------------------------------------------
// The engine thread.

void Engine::Impl::run() {
  try {
    while (true) {
      const Outcome o = run_cycle();
      if (o == Outcome::stop) return;
      if (o == Outcome::sleep && !sleep()) return;
      // A cycle time paces cycles (busy and idle alike) from their starts.
      if (o != Outcome::sleep && cycle_time.count() > 0)
        std::this_thread::sleep_until(cycle_started + cycle_time);
      // Between idle cycles of the linger, let a runnable thread of this
      // process (the user's, about to submit) have the core: where ranks and
      // their engine threads outnumber the cores, back-to-back cycles would
      // otherwise hold it until the scheduler's next tick.
      else if (o == Outcome::idle)
        std::this_thread::yield();
    }
  } catch (...) {
    // The communicator or the store failed (or an engine bug): this rank's
    // error becomes the root cause unless another rank recorded one first.
    Failure mine = classify(std::current_exception());
    mine.message = "rank " + std::to_string(rank) + ": " + mine.message;
    publish_failure(mine);
    // Ranks asleep in this epoch must not enter a cycle this rank will never
    // join. (Ranks inside a collective learn it from the communicator: its
    // failure or, for a failure outside it, its timeout.)
    try {
      doorbell->ring_failure(epoch);
    } catch (const std::exception&) {
    }
    stop_with(recorded_failure(mine));
  }
}

bool Engine::Impl::has_local_work() {
  std::lock_guard lock(mutex);
  return !incoming.empty() || (join_state && !joined) || shutdown_requested || abort_request.has_value();
}

Engine::Impl::Outcome Engine::Impl::run_cycle() {
  const auto t0 = Clock::now();
  cycle_started = t0;

  // 1. Collect what was submitted since the last cycle.
  bool want_join = false, want_shutdown = false;
  std::optional<Failure> abort_now;
  {
    std::lock_guard lock(mutex);
    collected.swap(incoming);
    want_join = join_state && !joined;
    want_shutdown = shutdown_requested;
    abort_now = abort_request;
  }
  const bool new_work = !collected.empty() || want_join || want_shutdown || abort_now;
  if (want_join) joined = true;
  const ResponseCache& cache = negotiator.cache();
  for (auto& r : collected) {
    r->collected = t0;
    if (r->ordered) {
      ordered.push_back(std::move(r));
      continue;
    }
    const int slot = cache.find(r->name);
    if (slot >= 0 && cache.entry(slot).meta.agrees_with(r->meta)) {
      r->status = Request::Status::cached;
      r->slot = slot;
      if (by_slot.size() <= size_t(slot)) by_slot.resize(size_t(slot) + 1, nullptr);
      by_slot[size_t(slot)] = r.get();
      add(counters.cache_hits);
    } else {
      append_entry(payload_body, r->name, r->meta);
      ++payload_entries;
      r->status = Request::Status::reported;
      add(counters.cache_misses);
    }
    std::string name = r->name;
    named.emplace(std::move(name), std::move(r));
  }
  collected.clear();
  if (abort_now) publish_failure(*abort_now);

  // 2. This rank's cycle record.
  const size_t cache_words = cache.words();
  const size_t words = cycle_state_words(cache_words);
  record.resize(words);
  CycleStateWriter w(record, cache_words);
  if (new_work) w.set_flag(kNewWork);
  if (joined) w.set_flag(kJoined);
  if (want_shutdown) w.set_flag(kShutdown);
  if (abort_now) w.set_flag(kFailed);
  if (rank == 0 && t0 - last_busy >= opt.linger) w.set_flag(kLingerExpired);
  if (autotuning)
    w.set_tuning(uint64_t(tuned_fusion_threshold.load(std::memory_order_relaxed)),
                 uint64_t(tuned_cycle_time_us.load(std::memory_order_relaxed)));
  payload = payload_entries ? finish_payload(payload_body, payload_entries) : std::string();
  payload_body.clear();
  payload_entries = 0;
  w.set_payload_bytes(payload.size());
  for (size_t i = 0; i < ordered.size() && i < kOrderedWindow; ++i) w.offer_ordered(OrderedSignature::of(ordered[i]->meta));
  for (size_t s = 0; s < by_slot.size(); ++s)
    if (by_slot[s]) w.set_bit(s);

  // 3. Exchange records.
  records.resize(words * size_t(size));
  comm->allgather(BufferView{record.data(), words, DType::i64}, BufferView{records.data(), records.size(), DType::i64});
  views.clear();
  for (int r = 0; r < size; ++r) views.emplace_back(records.data() + size_t(r) * words, cache_words);
  ++cycle;
  add(counters.cycles);

  // Rank 0's tuning, for every rank from this cycle on.
  if (views[0].has(kTuning)) {
    executor.set_fusion_threshold(size_t(views[0].tuned_fusion_threshold()));
    cycle_time = std::chrono::microseconds(int64_t(views[0].tuned_cycle_time_us()));
    // What this rank now runs with, for stats(): read back from where it is
    // used, so that stats show a rank that did not follow.
    const uint64_t threshold = executor.fusion_threshold(), cycle_us = uint64_t(cycle_time.count());
    if (threshold != counters.fusion_threshold_bytes.load(std::memory_order_relaxed) ||
        cycle_us != counters.cycle_time_us.load(std::memory_order_relaxed)) {
      add(counters.tuning_changes);
      counters.fusion_threshold_bytes.store(threshold, std::memory_order_relaxed);
      counters.cycle_time_us.store(cycle_us, std::memory_order_relaxed);
    }
  }

  // 4. A rank failed: every rank stops with the recorded root cause.
  for (int r = 0; r < size; ++r)
    if (views[size_t(r)].has(kFailed)) {
      stop_with(recorded_failure(abort_now));
      return Outcome::stop;
    }

  // 5. Negotiation payloads.
  size_t total = 0;
  payload_counts.assign(size_t(size), 0);
  for (int r = 0; r < size; ++r) total += payload_counts[size_t(r)] = views[size_t(r)].payload_bytes();
  payload_spans.assign(size_t(size), {});
  if (total > 0) {
    payloads_recv.resize(total);
    comm->allgatherv(BufferView{payload.data(), payload.size(), DType::u8},
                     BufferView{payloads_recv.data(), total, DType::u8}, payload_counts);
    size_t off = 0;
    for (int r = 0; r < size; ++r) {
      payload_spans[size_t(r)] = std::span<const std::byte>(payloads_recv.data() + off, payload_counts[size_t(r)]);
      off += payload_counts[size_t(r)];
    }
  }

  // 6. Decide (identically on every rank).
  negotiator.decide(views, payload_spans, cycle, decision);
  if (decision.negotiated) add(counters.negotiations);
  const auto t1 = Clock::now();
  add(counters.negotiation_ns, ns(t1 - t0));

  // 7. Apply: evictions, mismatches, failed ordered positions.
  for (int slot : decision.evicted_slots)
    if (size_t(slot) < by_slot.size() && by_slot[size_t(slot)]) {
      by_slot[size_t(slot)]->status = Request::Status::reported;
      by_slot[size_t(slot)]->slot = -1;
      by_slot[size_t(slot)] = nullptr;
    }
  for (const auto& m : decision.mismatches) {
    add(counters.mismatches);
    if (auto it = named.find(m.name); it != named.end()) {
      finished.emplace_back(std::move(it->second), std::make_exception_ptr(MismatchError(m.message)));
      named.erase(it);
    }
  }
  for (size_t i = 0; i < decision.ordered_consumed && i < ordered.size(); ++i)
    if (!decision.ordered_failures[i].empty()) {
      add(counters.mismatches);
      add(counters.ops_failed);
      ordered[i]->state->fail(std::make_exception_ptr(MismatchError(decision.ordered_failures[i])));
    }
  if (!finished.empty()) complete_group({});

  // 8. Run what is ready.
  work.clear();
  for (ReadyOp& op : decision.ready) {
    Request* local = nullptr;
    if (op.ordered) {
      if (op.held_by(rank)) {
        COHORT_CHECK_LT(op.ordered_position, ordered.size()) << "ordered window out of step (engine bug)";
        local = ordered[op.ordered_position].get();
        op.meta = local->meta;  // exact scales (the signature carries their hash)
      }
    } else if (op.held_by(rank)) {
      auto it = named.find(op.name);
      COHORT_CHECK(it != named.end()) << "op '" << op.name << "' is ready but rank " << rank
                                      << " holds no request for it (engine bug)";
      local = it->second.get();
    }
    if (local) {
      local->ready = t1;
      local->state->mark_agreed(std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count());
    }
    Work& wk = work.emplace_back();
    wk.op = &op;
    wk.local = local;
  }
  executor.run(work, [this](std::span<Work* const> group) { complete_group(group); });
  const size_t pop = std::min(decision.ordered_consumed, ordered.size());
  ordered.erase(ordered.begin(), ordered.begin() + static_cast<std::ptrdiff_t>(pop));
  const auto t2 = Clock::now();
  add(counters.execution_ns, ns(t2 - t1));

  // 9. join() completes when every rank is inside it.
  if (decision.all_joined && joined) {
    joined = false;
    std::shared_ptr<HandleState> st;
    {
      std::lock_guard lock(mutex);
      st = std::move(join_state);
    }
    if (st) {
      st->last_joined = decision.last_joined;
      st->complete();
    }
  }

  // 10. Shutdown: every rank stops at this cycle.
  for (int r = 0; r < size; ++r)
    if (views[size_t(r)].has(kShutdown)) {
      stop_with(std::make_exception_ptr(PeerShutDownError(
          "engine '" + label + "' was shut down by rank " + std::to_string(r) + " before this op ran on every rank",
          r)));
      return Outcome::stop;
    }

  // 11. Coordinator duties.
  bool idle = decision.ready.empty() && decision.mismatches.empty() && decision.ordered_consumed == 0 &&
              !decision.negotiated;
  for (int r = 0; r < size && idle; ++r) idle = !views[size_t(r)].has(kNewWork);
  if (rank == 0) {
    if (inspector.enabled() && t2 - last_pass >= inspector.pass_interval()) stall_pass(t2);
    if (timeline && !idle) {
      std::ostringstream args;
      args << "\"cycle\": " << cycle << ", \"ops\": " << decision.ready.size()
           << ", \"cached\": " << decision.cache_hits_ready << ", \"negotiated\": " << (decision.negotiated ? 1 : 0);
      timeline->span("cycles", "CYCLE", t0, t2, args.str());
    }
  }

  // 12. Sleep when nothing happened anywhere for the linger time (rank 0's
  // vote, so that every rank decides the same).
  if (!idle) last_busy = t2;
  if (!idle) return Outcome::busy;
  return views[0].has(kLingerExpired) ? Outcome::sleep : Outcome::idle;
}

void Engine::Impl::complete_group(std::span<Work* const> group) {
  // Counters first, so that a caller reading stats() after wait() sees them.
  {
    const auto& c = executor.counters();
    counters.fused_ops.store(c.fused_ops, std::memory_order_relaxed);
    counters.fusion_groups.store(c.fusion_groups, std::memory_order_relaxed);
    counters.bytes.store(c.bytes, std::memory_order_relaxed);
  }
  // Names leave the in-flight set before their handles complete, so that a
  // caller may resubmit a name as soon as wait() returns.
  for (Work* w : group) {
    if (!w->local) continue;
    Request& r = *w->local;
    if (timeline) emit_timeline(r, *w);
    if (autotuning && !w->error) autotune_observe(r);
    if (r.ordered) {
      if (w->error) {
        add(counters.ops_failed);
        r.state->fail(w->error);
      } else {
        add(counters.ops_completed);
        r.state->complete();
      }
      continue;
    }
    auto it = named.find(r.name);
    COHORT_CHECK(it != named.end()) << "completed op '" << r.name << "' is not pending (engine bug)";
    if (r.slot >= 0 && size_t(r.slot) < by_slot.size() && by_slot[size_t(r.slot)] == &r) by_slot[size_t(r.slot)] = nullptr;
    finished.emplace_back(std::move(it->second), w->error);
    named.erase(it);
  }
  if (finished.empty()) return;
  {
    std::lock_guard lock(mutex);
    for (auto& [r, _] : finished) in_flight.erase(r->name);
  }
  for (auto& [r, error] : finished) {
    if (error) {
      add(counters.ops_failed);
      r->state->fail(error);
    } else {
      add(counters.ops_completed);
      r->state->complete();
    }
  }
  finished.clear();
}

void Engine::Impl::emit_timeline(const Request& r, const Work& w) {
  const std::string lane = r.ordered ? "ordered" : r.name;
  timeline->span(lane, "QUEUE", r.submitted, r.collected);
  timeline->span(lane, "NEGOTIATE", r.collected, r.ready);
  timeline->span(lane, "WAIT_FOR_CYCLE", r.ready, w.start);
  if (w.fused) {
    timeline->span(lane, "FUSION_COPY_IN", w.start, w.copied_in);
    timeline->span(lane, "COLLECTIVE", w.copied_in, w.reduced);
    timeline->span(lane, "COPY_OUT", w.reduced, w.end);
  } else {
    timeline->span(lane, "COLLECTIVE", w.copied_in, w.reduced);
  }
  std::ostringstream args;
  args << "\"bytes\": " << r.in.bytes() << ", \"cached\": " << (r.status == Request::Status::cached ? 1 : 0)
       << ", \"fused\": " << (w.fused ? 1 : 0) << ", \"op\": \"" << json::escape(r.meta.describe()) << "\"";
  if (w.error) args << ", \"failed\": 1";
  timeline->span(lane, upper(op_kind_name(r.meta.kind)).c_str(), r.submitted, w.end, args.str());
}

void Engine::Impl::publish_tuning() {
  tuned_fusion_threshold.store(tuner->current().fusion_threshold_bytes, std::memory_order_relaxed);
  tuned_cycle_time_us.store(tuner->current().cycle_time_us, std::memory_order_relaxed);
}

// Rank 0 times training steps by the recurrence of one op (StepClock) and
// feeds them to the autotuner, until a wrapper drives the steps or the
// search converged; its choice reaches every rank through the next cycle's
// records.
void Engine::Impl::autotune_observe(const Request& r) {
  if (!own_step_clock.load(std::memory_order_relaxed)) return;
  const uint64_t id = r.ordered ? op_identity(OrderedSignature::of(r.meta).a, r.meta.count)
                                : op_identity(r.name);
  std::optional<std::string> csv;
  {
    std::lock_guard lock(tune_mutex);
    if (tune_driver || tuner->converged()) return;
    const auto step = step_clock.observe(id, Clock::now());
    if (!step) return;
    csv = autotune_on_step(std::chrono::duration<double>(*step).count());
    if (tuner->converged()) own_step_clock = false;
  }
  if (csv) write_autotune_log(*csv);
}

void Engine::Impl::write_autotune_log(const std::string& csv) const {
  if (opt.autotune_log->empty()) return;
  if (std::FILE* f = std::fopen(opt.autotune_log->c_str(), "w")) {
    std::fwrite(csv.data(), 1, csv.size(), f);
    std::fclose(f);
  } else {
    COHORT_LOG(warn) << "engine '" << label << "': cannot write COHORT_AUTOTUNE_LOG '" << *opt.autotune_log << "'";
  }
}

std::optional<std::string> Engine::Impl::autotune_on_step(double seconds) {
  tuner->on_step(seconds);
  publish_tuning();
  const AutotuneTrial* last = tuner->trials().empty() ? nullptr : &tuner->trials().back();
  if (last && last->step == tuner->steps())
    COHORT_LOG(info) << "engine '" << label << "': autotune: " << describe(last->params) << ": "
                     << 1e3 * last->seconds_per_step << " ms per step";
  if (tuner->converged() && tuner->converged_at_step() == tuner->steps()) {
    COHORT_LOG(info) << "engine '" << label << "': autotune converged after " << tuner->steps()
                     << " steps: " << describe(tuner->current()) << " (configured: " << describe(tuner->start())
                     << ")";
    return autotune_csv(*tuner);
  }
  return std::nullopt;
}

bool Engine::Impl::has_pending_requests() const {
  return !named.empty() || !ordered.empty() || joined;
}

bool Engine::Impl::sleep() {
  add(counters.sleeps);
  if (rank == 0) {
    if (inspector.enabled()) stall_pass(Clock::now());
    // Every rank left the previous epoch before the cycle that decided this
    // sleep could complete.
    if (epoch > 0) {
      try {
        doorbell->forget(epoch - 1);
      } catch (const Error& e) {
        COHORT_LOG(warn) << "engine '" << label << "': cannot remove an old doorbell key: " << e.what();
      }
    }
  }
  doorbell->begin_sleep(epoch, [this] { return has_local_work(); });
  const bool waiting = has_pending_requests();
  auto next_probe = Clock::now() + opt.liveness_probe;
  Doorbell::Ring ring = Doorbell::Ring::none;
  while (ring == Doorbell::Ring::none) {
    std::optional<Clock::time_point> deadline;
    if (rank == 0 && inspector.enabled()) deadline = inspector.next_deadline();
    if (waiting) deadline = std::min(deadline.value_or(next_probe), next_probe);
    auto timeout = opt.doorbell_slice;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()) +
                        std::chrono::milliseconds(1);
      timeout = std::clamp(left, std::chrono::milliseconds(1), timeout);
    }
    ring = doorbell->wait(timeout);
    if (ring != Doorbell::Ring::none) break;
    const auto now = Clock::now();
    if (rank == 0 && inspector.enabled()) stall_check(now);
    if (waiting && now >= next_probe) {
      next_probe = now + opt.liveness_probe;
      abort_if_abandoned();
      ring_self();
    }
  }
  doorbell->end_sleep();
  ++epoch;
  if (ring == Doorbell::Ring::failure) {
    stop_with(recorded_failure(std::nullopt));
    return false;
  }
  return true;
}

void Engine::Impl::abort_if_abandoned() {
  if (!opt.abandoned) return;
  std::optional<std::string> why;
  try {
    why = opt.abandoned();
  } catch (const std::exception& e) {
    // The store is gone (the launcher ended): the group's own failures
    // speak for it.
    COHORT_LOG(debug) << "engine '" << label << "': cannot ask whether the world was abandoned: " << e.what();
    return;
  }
  if (!why) return;
  // A member that died is named more precisely (its pid, the op) by the
  // communicator's liveness check in the cycle this probe rings: the
  // abandonment fails only ops that such a cycle left waiting.
  if (!abandonment_seen) {
    abandonment_seen = true;
    return;
  }
  std::lock_guard lock(mutex);
  if (!abort_request) abort_request = Failure{FailureKind::peer_lost, -1, "the elastic world was abandoned: " + *why};
}

void Engine::Impl::ring_self() {
  try {
    if (doorbell->ring_if_sleeping()) add(counters.rings);
  } catch (const std::exception& e) {
    COHORT_LOG(warn) << "engine '" << label << "': cannot ring the doorbell: " << e.what();
  }
}

void Engine::Impl::stall_pass(Clock::time_point now) {
  inspector.begin(now);
  negotiator.for_each_waiting(views, [this](const std::string& what, const std::vector<bool>& present) {
    inspector.observe(what, present);
  });
  inspector.end();
  last_pass = now;
  stall_check(now);
}

void Engine::Impl::stall_check(Clock::time_point now) {
  auto findings = inspector.check(now);
  if (!findings.warning.empty()) {
    add(counters.stall_warnings);
    COHORT_LOG(warn) << "engine '" << label << "': " << findings.warning;
  }
  if (!findings.shutdown.empty()) {
    COHORT_LOG(error) << "engine '" << label << "': " << findings.shutdown;
    {
      std::lock_guard lock(mutex);
      if (!abort_request) abort_request = Failure{FailureKind::timeout, -1, findings.shutdown};
    }
    ring();
  }
}

void Engine::Impl::publish_failure(const Failure& f) {
  try {
    store->compare_set(error_key, "", encode(f));
  } catch (const std::exception& e) {
    COHORT_LOG(error) << "engine '" << label << "': cannot record the failure in the store (" << e.what()
                      << "): " << f.message;
  }
}

std::exception_ptr Engine::Impl::recorded_failure(const std::optional<Failure>& fallback) {
  Failure root;
  try {
    root = decode(store->get(error_key, std::chrono::seconds(10)));
  } catch (const std::exception& e) {
    if (fallback)
      root = *fallback;
    else
      root = Failure{FailureKind::error, -1, std::string("a rank failed but its cause could not be read: ") + e.what()};
  }
  root.message = "engine '" + label + "' failed: " + root.message;
  return to_exception(root);
}

void Engine::Impl::stop_with(std::exception_ptr error) {
  std::vector<std::unique_ptr<Request>> left;
  std::shared_ptr<HandleState> join;
  {
    std::lock_guard lock(mutex);
    stopped = true;
    stopped_error = error;
    left.swap(incoming);
    join = std::move(join_state);
    in_flight.clear();
  }
  add(counters.ops_failed, left.size() + named.size() + ordered.size() + finished.size());
  for (auto& r : left) r->state->fail(error);
  for (auto& [_, r] : named) r->state->fail(error);
  for (auto& r : ordered) r->state->fail(error);
  for (auto& [r, _] : finished) r->state->fail(error);
  named.clear();
  ordered.clear();
  finished.clear();
  by_slot.clear();
  if (join) join->fail(error);
}

// ---------------------------------------------------------------------------
// Engine

Engine::Engine(std::shared_ptr<comm::Communicator> comm, std::shared_ptr<rendezvous::Store> store,
               EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(store), std::move(options))) {}

Engine::~Engine() {
  if (std::uncaught_exceptions() > 0)
    impl_->request_abort("its engine was destroyed during exception unwinding");
  else
    impl_->request_shutdown();
  impl_->wait_stopped();
}

int Engine::rank() const { return impl_->rank; }
int Engine::size() const { return impl_->size; }
const EngineOptions& Engine::options() const { return impl_->opt; }
EngineStats Engine::stats() const { return impl_->counters.snapshot(); }

bool Engine::autotunes() const { return impl_->opt.autotune != 0; }

std::optional<Engine::StepTuning> Engine::tune_step(const void* driver, int64_t bucket_bytes) {
  Impl& m = *impl_;
  if (!m.autotuning) return std::nullopt;
  std::optional<std::string> csv;
  StepTuning next;
  {
    std::lock_guard lock(m.tune_mutex);
    const auto now = Clock::now();
    if (!m.tune_driver) {
      if (m.tuner->converged()) return std::nullopt;
      // A fresh search over the three knobs: samples the engine's own clock
      // took so far had another bucket layout. The caller's changes take
      // effect at a step's start on every rank, so no step needs settling.
      const AutotuneParams configured = m.tuner->start();
      AutotuneOptions o;
      o.bucket_bytes = default_bucket_grid();
      o.settle_steps = 0;
      m.tuner = std::make_unique<Autotuner>(
          AutotuneParams{configured.fusion_threshold_bytes, configured.cycle_time_us, bucket_bytes}, o);
      m.tune_driver = driver;
      m.own_step_clock = false;
      m.publish_tuning();
    } else if (m.tune_driver != driver) {
      return std::nullopt;  // another wrapper drives the search
    } else if (!m.tuner->converged()) {
      csv = m.autotune_on_step(std::chrono::duration<double>(now - m.last_step_mark).count());
    }
    m.last_step_mark = now;
    next = StepTuning{m.tuner->current().bucket_bytes, !m.tuner->converged()};
  }
  if (csv) m.write_autotune_log(*csv);
  return next;
}

void Engine::end_tune_steps(const void* driver) {
  Impl& m = *impl_;
  if (!m.autotuning) return;
  std::lock_guard lock(m.tune_mutex);
  if (m.tune_driver != driver || m.tuner->converged()) return;
  m.tuner->stop();
  m.publish_tuning();
  COHORT_LOG(info) << "engine '" << m.label << "': autotune stopped after " << m.tuner->steps()
                   << " steps, before it converged (its driver went): " << describe(m.tuner->current())
                   << ", as configured";
}

void Engine::shutdown() {
  impl_->request_shutdown();
  impl_->wait_stopped();
}

void Engine::abort(const std::string& reason) { impl_->request_abort(reason); }

Handle Engine::allreduce_async(std::string name, BufferView in, BufferView out, AllreduceOptions o) {
  check_buffer(in, name, "input");
  check_buffer(out, name, "output");
  COHORT_CHECK_EQ(in.count, out.count) << "allreduce '" << name << "': input and output counts differ";
  COHORT_CHECK(in.dtype == out.dtype) << "allreduce '" << name << "': input and output dtypes differ";
  check_no_partial_overlap(in, out, name);
  check_scales(in.dtype, o.prescale, o.postscale, name);
  check_shape(o.shape, in.count, name);
  OpMeta m{OpKind::allreduce, in.dtype, o.op, -1, in.count, 1, o.prescale, o.postscale, std::move(o.shape)};
  return impl_->submit(impl_->make_request(std::move(name), false, std::move(m), in, out));
}

namespace {
OpMeta allgather_meta(const std::string& name, BufferView in, AllgatherOptions& o) {
  check_buffer(in, name, "input");
  check_shape(o.shape, in.count, name);
  size_t row = o.row_elements;
  if (!o.shape.empty() && row == 1) {
    row = 1;
    for (size_t i = 1; i < o.shape.size(); ++i) row *= size_t(o.shape[i]);
  }
  COHORT_CHECK_GE(row, size_t(1)) << "allgather '" << name << "': rows must have at least one element";
  COHORT_CHECK_EQ(in.count % row, size_t(0)) << "allgather '" << name << "': count is not a multiple of the row size";
  return OpMeta{OpKind::allgather, in.dtype, ReduceOp::sum, -1, in.count, row, 1.0, 1.0, std::move(o.shape)};
}
}  // namespace

Handle Engine::allgather_async(std::string name, BufferView in, AllgatherOptions o) {
  OpMeta m = allgather_meta(name, in, o);
  auto r = impl_->make_request(std::move(name), false, std::move(m), in, {});
  r->allocate = std::move(o.allocate);
  return impl_->submit(std::move(r));
}

Handle Engine::broadcast_async(std::string name, BufferView buffer, int root, BroadcastOptions o) {
  check_buffer(buffer, name, "");
  COHORT_CHECK(root >= 0 && root < size()) << "broadcast '" << name << "': root " << root << " outside [0, "
                                           << size() << ")";
  check_shape(o.shape, buffer.count, name);
  OpMeta m{OpKind::broadcast, buffer.dtype, ReduceOp::sum, root, buffer.count, 1, 1.0, 1.0, std::move(o.shape)};
  return impl_->submit(impl_->make_request(std::move(name), false, std::move(m), buffer, buffer));
}

namespace {
OpMeta reduce_scatter_meta(const std::string& name, BufferView in, BufferView out, ReduceScatterOptions& o,
                           int size) {
  check_buffer(in, name, "input");
  check_buffer(out, name, "output");
  COHORT_CHECK_EQ(in.count, out.count * size_t(size))
      << "reduce_scatter '" << name << "': input must hold size() output blocks";
  COHORT_CHECK(in.dtype == out.dtype) << "reduce_scatter '" << name << "': input and output dtypes differ";
  check_no_partial_overlap(in, out, name);
  COHORT_CHECK(in.data != out.data || in.count == 0 || size == 1)
      << "reduce_scatter '" << name << "': cannot run in place";
  check_scales(in.dtype, o.prescale, o.postscale, name);
  check_shape(o.shape, in.count, name);
  return OpMeta{OpKind::reduce_scatter, in.dtype, o.op, -1, in.count, 1, o.prescale, o.postscale, std::move(o.shape)};
}

OpMeta alltoall_meta(const std::string& name, BufferView in, BufferView out, AlltoallOptions& o, int size) {
  check_buffer(in, name, "input");
  check_buffer(out, name, "output");
  COHORT_CHECK_EQ(in.count, out.count) << "alltoall '" << name << "': input and output counts differ";
  COHORT_CHECK_EQ(in.count % size_t(size), size_t(0)) << "alltoall '" << name << "': count must divide by size()";
  COHORT_CHECK(in.dtype == out.dtype) << "alltoall '" << name << "': input and output dtypes differ";
  COHORT_CHECK(in.data != out.data || in.count == 0 || size == 1) << "alltoall '" << name << "': cannot run in place";
  check_no_partial_overlap(in, out, name);
  check_shape(o.shape, in.count, name);
  return OpMeta{OpKind::alltoall, in.dtype, ReduceOp::sum, -1, in.count, 1, 1.0, 1.0, std::move(o.shape)};
}
}  // namespace

Handle Engine::reduce_scatter_async(std::string name, BufferView in, BufferView out, ReduceScatterOptions o) {
  OpMeta m = reduce_scatter_meta(name, in, out, o, size());
  return impl_->submit(impl_->make_request(std::move(name), false, std::move(m), in, out));
}

Handle Engine::alltoall_async(std::string name, BufferView in, BufferView out, AlltoallOptions o) {
  OpMeta m = alltoall_meta(name, in, out, o, size());
  return impl_->submit(impl_->make_request(std::move(name), false, std::move(m), in, out));
}

Handle Engine::barrier_async(std::string name) {
  if (name.empty()) {
    std::lock_guard lock(impl_->mutex);
    name = "barrier." + std::to_string(impl_->unnamed_barriers++);
  }
  OpMeta m{OpKind::barrier, DType::u8, ReduceOp::sum, -1, 0, 1, 1.0, 1.0, {}};
  return impl_->submit(impl_->make_request(std::move(name), false, std::move(m), {}, {}));
}

Handle Engine::submit_ordered_allreduce(BufferView in, BufferView out, AllreduceOptions o) {
  const std::string what = "ordered allreduce";
  check_buffer(in, what, "input");
  check_buffer(out, what, "output");
  COHORT_CHECK_EQ(in.count, out.count) << what << ": input and output counts differ";
  COHORT_CHECK(in.dtype == out.dtype) << what << ": input and output dtypes differ";
  check_no_partial_overlap(in, out, what);
  check_scales(in.dtype, o.prescale, o.postscale, what);
  check_shape(o.shape, in.count, what);
  OpMeta m{OpKind::allreduce, in.dtype, o.op, -1, in.count, 1, o.prescale, o.postscale, std::move(o.shape)};
  return impl_->submit(impl_->make_request({}, true, std::move(m), in, out));
}

Handle Engine::submit_ordered_allgather(BufferView in, AllgatherOptions o) {
  OpMeta m = allgather_meta("ordered allgather", in, o);
  auto r = impl_->make_request({}, true, std::move(m), in, {});
  r->allocate = std::move(o.allocate);
  return impl_->submit(std::move(r));
}

Handle Engine::submit_ordered_broadcast(BufferView buffer, int root, BroadcastOptions o) {
  check_buffer(buffer, "ordered broadcast", "");
  COHORT_CHECK(root >= 0 && root < size()) << "ordered broadcast: root " << root << " outside [0, " << size() << ")";
  check_shape(o.shape, buffer.count, "ordered broadcast");
  OpMeta m{OpKind::broadcast, buffer.dtype, ReduceOp::sum, root, buffer.count, 1, 1.0, 1.0, std::move(o.shape)};
  return impl_->submit(impl_->make_request({}, true, std::move(m), buffer, buffer));
}

Handle Engine::submit_ordered_reduce_scatter(BufferView in, BufferView out, ReduceScatterOptions o) {
  OpMeta m = reduce_scatter_meta("ordered reduce_scatter", in, out, o, size());
  return impl_->submit(impl_->make_request({}, true, std::move(m), in, out));
}

Handle Engine::submit_ordered_alltoall(BufferView in, BufferView out, AlltoallOptions o) {
  OpMeta m = alltoall_meta("ordered alltoall", in, out, o, size());
  return impl_->submit(impl_->make_request({}, true, std::move(m), in, out));
}

Handle Engine::join_async() {
  auto state = std::make_shared<HandleState>("join");
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopped) {
      state->fail(impl_->stopped_error);
      return Handle(state);
    }
    COHORT_CHECK(!impl_->join_state) << "join() is already in progress on rank " << impl_->rank;
    impl_->join_state = state;
  }
  impl_->ring();
  return Handle(state);
}

int Engine::join() {
  Handle h = join_async();
  h.wait();
  return h.last_joined_rank();
}

}  // namespace cohort::engine
