#include "tools/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "cohort/common/check.h"
#include "cohort/engine/cycle_state.h"
#include "cohort/engine/fusion_buffer.h"
#include "cohort/engine/negotiation.h"
#include "tools/sim/jitter.h"

namespace cohort::sim {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<double>& bytes, double first_cap, double cap) {
  std::vector<std::vector<size_t>> done;
  std::vector<size_t> open;
  double open_bytes = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // A tensor that fills a bucket by itself gets one of its own.
    if (bytes[i] >= cap && !open.empty()) {
      done.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes[i];
    if (open_bytes >= (done.empty() ? first_cap : cap)) {
      done.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
  }
  if (!open.empty()) done.push_back(std::move(open));
  return done;
}

double core_share(const Topology& t, double runnable) {
  return t.cores_per_host > 0 && runnable > 0 ? std::min(1.0, t.cores_per_host / (runnable + t.background_threads))
                                              : 1.0;
}

namespace {

// How much longer the slowest of the first `ranks` ranks computes than the
// median rank alone: a straggler's factor, or every rank's step-to-step
// jitter (jitter.h), whichever is more (a straggler far behind is rarely
// overtaken by its neighbours' jitter).
double slowest_rank_factor(const Topology& t, const Workload& w, int ranks) {
  double f = slowest_of(w.step_periods_s, ranks);
  for (const Straggler& x : t.stragglers)
    if (x.rank < ranks) f = std::max(f, x.compute_factor);
  return f;
}

constexpr double kNever = std::numeric_limits<double>::infinity();
// Bytes one op's name and meta take in a negotiation payload.
constexpr double kPayloadBytesPerOp = 64;
// Ordered ops a cycle can agree on (cohort/engine/cycle_state.h).
constexpr size_t kOrderedPerCycle = engine::kOrderedWindow;

enum class Kind { allreduce, reduce_scatter, allgather };

struct Op {
  Kind kind = Kind::allreduce;
  double wire_bytes = 0;  // what the collective moves (allgather: each rank's block)
  double raw_bytes = 0;   // before compression
  double ready_work = 0;  // compute work (seconds at full speed) done when it is submitted
  double needed_work = kNever;  // the compute cannot pass this point before the op is done
  bool ordered = false;
};

// A submission just after a gate: the compute has passed it (its op done).
constexpr double kJustAfter = 1e-12;

struct Task {
  double work = 0;  // seconds at full speed
  double cpu = 0;   // fraction of it that is CPU work
  Cost cost;
  int group = -1;   // index into the cycle's groups; -1: negotiation
};

struct StepStats {
  double start = 0;
  double comm_s = 0;
  double nic_bytes = 0;
  double shm_bytes = 0;
  double cycles = 0;
  double collectives = 0;
};

class Simulation {
 public:
  Simulation(const Topology& t, const Workload& w, const Strategy& s)
      : topo_(t), wl_(w), st_(s), alg_(resolve_algorithm(s.backend, t)) {
    COHORT_CHECK_AS(ConfigError, !w.tensors.empty()) << "the workload has no tensors";
    COHORT_CHECK_AS(ConfigError, s.fusion_threshold_bytes >= 0) << "fusion threshold must not be negative";
    COHORT_CHECK_AS(ConfigError, s.cycle_time_s >= 0 && s.linger_s >= 0) << "cycle time and linger must not be negative";
    COHORT_CHECK_AS(ConfigError, s.first_bucket_bytes > 0 && s.bucket_bytes > 0) << "bucket caps must be positive";
    if (s.mode == Mode::zero) {
      COHORT_CHECK_AS(ConfigError, s.zero_stage >= 1 && s.zero_stage <= 3) << "zero stage must be 1, 2 or 3, not "
                                                                           << s.zero_stage;
      COHORT_CHECK_AS(ConfigError, !s.compress_fp16 && !w.ordered)
          << "zero runs its own reduce-scatters and allgathers: no compression, and a workload of tensors, not of "
             "recorded DDP buckets";
    }
    build_ops();
    compute_end_work_ = w.compute_end_s;
    // ZeRO: every rank updates its 1/p of the model.
    update_work_ = s.mode == Mode::zero ? w.update_s / t.ranks() : w.update_s;
    R_ = topo_.ranks_per_machine();
    T_ = w.threads;
    ref_share_ = share(T_);
    straggle_ = slowest_rank_factor(topo_, w, topo_.ranks());
    elem_bytes_ = s.compress_fp16 ? 2 : 4;
  }

  Prediction run(const SimOptions& o) {
    COHORT_CHECK_AS(ConfigError, o.steps > o.warmup && o.warmup >= 0) << "need more simulated steps than warm-up steps";
    start_step();
    size_t guard = 0;
    while (int(steps_.size()) <= o.steps) {
      COHORT_CHECK(++guard < (size_t(1) << 34)) << "simulation does not progress (bug)";
      const double cr = compute_rate();
      const double tr = task_rate();
      const double tc = compute_event_time(cr);
      const double te = engine_event_time(tr);
      const double t = std::min(tc, te);
      COHORT_CHECK(t < kNever) << "simulation deadlocked at t=" << now_ << " (bug)";
      advance(t, cr, tr, t == tc, t == te);
      process_compute();
      process_engine();
    }
    return summarize(o);
  }

 private:
  // ---- set-up ------------------------------------------------------------

  void build_ops() {
    const double ratio = st_.compress_fp16 ? 2.0 / wl_.element_bytes : 1.0;
    auto op = [&](double bytes, double ready, bool ordered) {
      Op x;
      x.raw_bytes = bytes;
      x.wire_bytes = std::min(bytes, std::ceil(bytes * ratio));
      x.ready_work = ready;
      x.ordered = ordered;
      ops_.push_back(x);
    };
    if (wl_.ordered) {
      for (const Tensor& t : wl_.tensors) op(t.bytes, t.ready_s, true);
    } else if (st_.mode == Mode::zero) {
      build_zero_ops();
    } else if (st_.mode == Mode::ddp) {
      // Buckets in arrival order (as after DDP's one rebuild), each submitted
      // when its last gradient is ready and after the buckets before it.
      std::vector<double> sizes;
      for (const Tensor& t : wl_.tensors) sizes.push_back(t.bytes);
      double previous = 0;
      for (const auto& members : assign_buckets(sizes, double(st_.first_bucket_bytes), double(st_.bucket_bytes))) {
        double bytes = 0, ready = previous;
        for (size_t i : members) {
          bytes += wl_.tensors[i].bytes;
          ready = std::max(ready, wl_.tensors[i].ready_s);
        }
        op(bytes, ready, true);
        previous = ready;
      }
    } else {
      for (const Tensor& t : wl_.tensors) op(t.bytes, t.ready_s, false);
    }
    for (size_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].needed_work < kNever) gates_.push_back(i);
    std::stable_sort(gates_.begin(), gates_.end(),
                     [&](size_t a, size_t b) { return ops_[a].needed_work < ops_[b].needed_work; });
    slot_.assign(ops_.size(), -1);
    submitted_at_.assign(ops_.size(), kNever);
    taken_.assign(ops_.size(), false);
    done_.assign(ops_.size(), false);
  }

  // ZeRO's ops, in submission order (see simulator.h). Groups are in
  // backward order: the workload's tensors, in ready order, cut into
  // ZeroOptimizer's flat buckets (stages 1-2) or grouped by unit (stage 3).
  void build_zero_ops() {
    const double p = topo_.ranks(), e = wl_.element_bytes;
    struct Group {
      double bytes = 0;  // padded to a multiple of the ranks below, as ZeroOptimizer's buckets are
      double ready = 0;  // its last gradient
      double forward_at = 0;
      void add(double b, double r) {
        bytes += b;
        ready = std::max(ready, r);
      }
    };
    std::vector<Group> groups;
    if (st_.zero_stage == 3) {
      // The layers (tensor units), in backward order...
      std::vector<std::string> names;
      std::vector<Group> layers;
      for (const Tensor& t : wl_.tensors) {
        const std::string unit = t.unit.empty() ? unit_of(t.name) : t.unit;
        const size_t k = size_t(std::find(names.begin(), names.end(), unit) - names.begin());
        if (k == names.size()) {
          names.push_back(unit);
          layers.emplace_back();
        }
        layers[k].add(t.bytes, t.ready_s);
      }
      // ...joined in forward order as the zero strategy does: a unit is
      // closed once it holds unit_bytes.
      std::vector<Group> forward;
      for (size_t k = layers.size(); k-- > 0;) {
        if (forward.empty() || forward.back().bytes >= double(st_.unit_bytes)) forward.emplace_back();
        forward.back().add(layers[k].bytes, layers[k].ready);
      }
      groups.assign(forward.rbegin(), forward.rend());
    } else {
      // ZeroOptimizer's buckets: in backward order, a new one when the next
      // tensor would take the open one past bucket_bytes.
      for (const Tensor& t : wl_.tensors) {
        if (groups.empty() || groups.back().bytes + t.bytes > double(st_.bucket_bytes)) groups.emplace_back();
        groups.back().add(t.bytes, t.ready_s);
      }
    }
    // The forward pass reaches group g once it has run the groups after it
    // (in backward order), a share of forward_s by bytes.
    const double forward = wl_.forward_or_estimate(), total = wl_.total_bytes();
    double before = 0;
    for (size_t g = groups.size(); g-- > 0;) {
      groups[g].forward_at = total > 0 ? forward * before / total : 0;
      before += groups[g].bytes;
      groups[g].bytes = std::ceil(groups[g].bytes / e / p) * p * e;
    }
    auto add = [&](Kind kind, const Group& g, double submit, double needed) {
      Op x;
      x.kind = kind;
      x.raw_bytes = x.wire_bytes = kind == Kind::allgather ? g.bytes / p : g.bytes;
      x.ready_work = submit;
      x.needed_work = needed;
      x.ordered = true;
      ops_.push_back(x);
    };
    const size_t G = groups.size();
    if (st_.zero_stage < 3) {
      // step() allgathers every bucket, first layers first; then backward
      // reduce-scatters them in bucket order.
      for (size_t g = G; g-- > 0;) add(Kind::allgather, groups[g], 0, groups[g].forward_at);
      double previous = 0;
      for (size_t g = 0; g < G; ++g) {
        previous = std::max(previous, groups[g].ready);
        add(Kind::reduce_scatter, groups[g], previous, kNever);
      }
      return;
    }
    // Stage 3, g = G-1 the first unit of the forward pass: each unit's gather
    // is waited for where the forward reaches it and prefetched once the
    // unit before it has its parameters.
    for (size_t g = G; g-- > 0;)
      add(Kind::allgather, groups[g], g + 1 == G ? 0 : groups[g + 1].forward_at + kJustAfter, groups[g].forward_at);
    // Backward: the last unit stays gathered; as unit g's gradients are
    // ready, the gather of the unit before it (which backward needs now)
    // goes first, then g's reduce-scatter.
    double previous = 0;
    for (size_t g = 0; g < G; ++g) {
      previous = std::max(previous, groups[g].ready);
      if (g + 1 < G) add(Kind::allgather, groups[g + 1], previous, previous);
      add(Kind::reduce_scatter, groups[g], previous, kNever);
    }
  }

  // ---- rates (processor sharing of the machine's cores) -------------------

  // The first point the compute may not pass: the first gate whose op is
  // not done.
  double gate() const {
    for (size_t i : gates_)
      if (!done_[i]) return ops_[i].needed_work;
    return kNever;
  }
  bool blocked() const { return phase_ == Phase::compute && work_ >= gate(); }
  bool computing() const { return (phase_ == Phase::compute && !blocked()) || phase_ == Phase::update; }
  double running_cpu() const { return es_ == EngineState::busy && !tasks_.empty() ? tasks_.front().cpu : 0; }

  double share(double runnable) const { return core_share(topo_, runnable); }

  double compute_rate() const {
    if (!computing()) return 0;
    const double runnable = R_ * T_ + R_ * running_cpu();
    return share(runnable) / ref_share_ / straggle_;
  }

  // Progress of the running task per second: its CPU part is slowed by the
  // compute threads it competes with (its calibrated time already includes
  // the engine threads competing among themselves); its waiting part is not.
  double task_rate() const {
    const double k = running_cpu();
    if (k <= 0) return 1;
    const double alone = share(R_ * k);
    const double now = share(R_ * k + (computing() ? R_ * T_ : 0));
    return 1 / (k * alone / now + (1 - k));
  }

  double compute_target() const {
    if (phase_ == Phase::update) return update_work_;
    double target = std::min(compute_end_work_, gate());
    if (next_submit_ < ops_.size()) target = std::min(target, ops_[next_submit_].ready_work);
    return target;
  }

  double compute_event_time(double rate) const {
    if (!computing()) return kNever;
    const double left = compute_target() - work_;
    if (left <= 0) return now_;
    return rate > 0 ? now_ + left / rate : kNever;
  }

  double engine_event_time(double rate) const {
    switch (es_) {
      case EngineState::busy: return now_ + tasks_.front().work / rate;
      case EngineState::waiting: return std::max(now_, next_cycle_at_);
      case EngineState::asleep: return wake_at_;
    }
    return kNever;
  }

  void advance(double t, double cr, double tr, bool compute_due, bool engine_due) {
    const double dt = t - now_;
    if (computing()) work_ = compute_due ? compute_target() : std::min(compute_target(), work_ + dt * cr);
    if (es_ == EngineState::busy) {
      Task& task = tasks_.front();
      task.work = engine_due ? 0 : std::max(0.0, task.work - dt * tr);
      if (task.group >= 0) stats().comm_s += dt;
    }
    now_ = t;
  }

  // ---- compute ------------------------------------------------------------

  void start_step() {
    steps_.push_back(StepStats{now_});
    phase_ = Phase::compute;
    work_ = 0;
    next_submit_ = 0;
    done_count_ = 0;
    std::fill(submitted_at_.begin(), submitted_at_.end(), kNever);
    std::fill(taken_.begin(), taken_.end(), false);
    std::fill(done_.begin(), done_.end(), false);
  }

  void submit(size_t i) {
    submitted_at_[i] = now_;
    if (es_ == EngineState::asleep && wake_at_ == kNever) wake_at_ = now_ + topo_.wake_s;
    if (es_ == EngineState::waiting && idle_until_submission_) next_cycle_at_ = now_;
  }

  void process_compute() {
    if (phase_ == Phase::compute) {
      while (next_submit_ < ops_.size() && ops_[next_submit_].ready_work <= work_) submit(next_submit_++);
      if (next_submit_ == ops_.size() && work_ >= compute_end_work_) {
        phase_ = Phase::wait;
        maybe_finish_step();
      }
    } else if (phase_ == Phase::update && work_ >= update_work_) {
      start_step();
      process_compute();
    }
  }

  void maybe_finish_step() {
    if (phase_ != Phase::wait || done_count_ < ops_.size()) return;
    phase_ = Phase::update;
    work_ = 0;
    if (update_work_ <= 0) {
      start_step();
      process_compute();
    }
  }

  // ---- engine -------------------------------------------------------------

  StepStats& stats() { return steps_.back(); }

  void process_engine() {
    while (true) {
      if (es_ == EngineState::busy && tasks_.front().work <= 0) {
        finish_task();
        continue;
      }
      if (es_ == EngineState::waiting && now_ >= next_cycle_at_) {
        start_cycle();
        continue;
      }
      if (es_ == EngineState::asleep && now_ >= wake_at_) {
        es_ = EngineState::waiting;
        next_cycle_at_ = now_;
        wake_at_ = kNever;
        continue;
      }
      return;
    }
  }

  double record_bytes() const {
    const double slots = double(std::min<int64_t>(st_.cache_capacity, int64_t(next_slot_)));
    return 8.0 * double(engine::cycle_state_words(size_t(std::ceil(slots / 64))));
  }

  void start_cycle() {
    cycle_start_ = now_;
    idle_until_submission_ = false;
    stats().cycles += 1;
    // What every rank submitted before this cycle began.
    std::vector<size_t> named_cached, named_new, ordered;
    for (size_t i = 0; i < ops_.size() && submitted_at_[i] <= now_; ++i) {
      if (taken_[i]) continue;
      if (ops_[i].ordered) {
        if (ordered.size() < kOrderedPerCycle) ordered.push_back(i);
        continue;
      }
      (slot_[i] >= 0 ? named_cached : named_new).push_back(i);
    }
    std::sort(named_cached.begin(), named_cached.end(), [&](size_t a, size_t b) { return slot_[a] < slot_[b]; });
    // Negotiation: the record allgather (or Horovod's tree), and the names
    // seen for the first time (or that the cache cannot hold) by name.
    Cost neg = st_.negotiation == Negotiation::tree ? tree_gather_broadcast_cost(topo_, record_bytes())
                                                    : allgather_cost(topo_, alg_, record_bytes());
    if (!named_new.empty()) neg += allgather_cost(topo_, alg_, kPayloadBytesPerOp * double(named_new.size()));
    neg.seconds += topo_.cycle_overhead_s;
    for (size_t i : named_new)
      if (int64_t(next_slot_) < st_.cache_capacity) slot_[i] = int(next_slot_++);

    cycle_ops_.clear();
    cycle_ops_.insert(cycle_ops_.end(), named_cached.begin(), named_cached.end());
    cycle_ops_.insert(cycle_ops_.end(), named_new.begin(), named_new.end());
    cycle_ops_.insert(cycle_ops_.end(), ordered.begin(), ordered.end());
    for (size_t i : cycle_ops_) taken_[i] = true;

    tasks_.clear();
    tasks_.push_back(Task{neg.seconds, 0, neg, -1});
    plan_groups();
    for (size_t g = 0; g < groups_.size(); ++g) {
      Cost c = group_cost(groups_[g]);
      tasks_.push_back(Task{c.seconds, c.seconds > 0 ? c.cpu_s / c.seconds : 0, c, int(g)});
    }
    cycle_idle_ = cycle_ops_.empty();
    es_ = EngineState::busy;
  }

  // cohort's own fusion planner over this cycle's ready ops.
  void plan_groups() {
    ready_.clear();
    for (size_t i : cycle_ops_) {
      engine::ReadyOp r;
      r.meta.kind = ops_[i].kind == Kind::allreduce        ? engine::OpKind::allreduce
                    : ops_[i].kind == Kind::reduce_scatter ? engine::OpKind::reduce_scatter
                                                           : engine::OpKind::allgather;
      r.meta.dtype = st_.compress_fp16 ? DType::f16 : DType::f32;
      r.meta.op = ReduceOp::sum;
      r.meta.count = uint64_t(std::ceil(ops_[i].wire_bytes / elem_bytes_));
      r.ordered = ops_[i].ordered;
      r.contributors = topo_.ranks();
      ready_.push_back(std::move(r));
    }
    engine::plan_fusion(ready_, size_t(st_.fusion_threshold_bytes), fusion_);
    groups_.clear();
    for (const auto& g : fusion_) {
      std::vector<size_t> members;
      for (size_t m : g.members) members.push_back(cycle_ops_[m]);
      groups_.push_back(std::move(members));
    }
  }

  Cost group_cost(const std::vector<size_t>& members) {
    const Op& first = ops_[members.front()];
    if (first.kind == Kind::allgather) return allgather_cost(topo_, alg_, first.wire_bytes);
    if (first.kind == Kind::reduce_scatter) {
      // Packing the gradient into the bucket, and averaging this rank's block.
      Cost c = reduce_scatter_cost(topo_, alg_, first.wire_bytes);
      const double local = first.wire_bytes * (1 + 1.0 / topo_.ranks()) / topo_.copy_bytes_per_s;
      c.seconds += local;
      c.cpu_s += local;
      return c;
    }
    double wire = 0, raw = 0;
    for (size_t i : members) {
      wire += ops_[i].wire_bytes;
      raw += ops_[i].raw_bytes;
    }
    Cost c = allreduce_cost(topo_, alg_, wire);
    // Fusion copies in and out; the averaging pass; compression casts.
    double local = wire / topo_.copy_bytes_per_s;
    if (members.size() > 1) local += 2 * wire / topo_.copy_bytes_per_s;
    if (st_.compress_fp16) local += 2 * raw / topo_.copy_bytes_per_s;
    c.seconds += local;
    c.cpu_s += local;
    return c;
  }

  void finish_task() {
    const Task task = tasks_.front();
    tasks_.pop_front();
    if (task.group >= 0) {
      stats().collectives += 1;
      stats().nic_bytes += task.cost.nic_bytes;
      stats().shm_bytes += task.cost.shm_bytes;
      for (size_t i : groups_[size_t(task.group)]) {
        done_[i] = true;
        ++done_count_;
      }
    }
    if (tasks_.empty()) end_cycle();
    if (task.group >= 0) maybe_finish_step();
  }

  bool work_waiting() const {
    for (size_t i = 0; i < ops_.size() && submitted_at_[i] <= now_; ++i)
      if (!taken_[i]) return true;
    return false;
  }

  void end_cycle() {
    es_ = EngineState::waiting;
    const double paced = std::max(now_, cycle_start_ + st_.cycle_time_s);
    if (!cycle_idle_) {
      last_busy_ = now_;
      next_cycle_at_ = paced;
      return;
    }
    // An idle cycle that began after the linger puts the engine to sleep; a
    // rank with work already waiting rings at once.
    if (cycle_start_ >= last_busy_ + st_.linger_s) {
      es_ = EngineState::asleep;
      wake_at_ = work_waiting() ? now_ + topo_.wake_s : kNever;
      return;
    }
    if (work_waiting()) {
      next_cycle_at_ = paced;
      return;
    }
    // Idle cycles repeat unchanged until a submission or the linger's end.
    const double period = std::max(now_ - cycle_start_, st_.cycle_time_s);
    if (period <= 0) {
      // A cycle that takes no time (free links, no cycle overhead, no cycle
      // time) repeated now would find the same nothing at the same instant
      // without end: the engine waits for the next submission (submit()
      // starts its cycle) or the linger's end, whichever comes first.
      next_cycle_at_ = last_busy_ + st_.linger_s;
      idle_until_submission_ = true;
      return;
    }
    // Jump to the first cycle at or after the next compute event (a
    // submission, at the earliest) or the linger's end.
    const double until = std::min(compute_event_time(compute_rate()), last_busy_ + st_.linger_s);
    double next = paced;
    if (until > next) {
      const double k = std::ceil((until - next) / period);
      stats().cycles += k;  // the skipped idle cycles, each as the one just run
      next += k * period;
    }
    next_cycle_at_ = next;
  }

  // ---- results ------------------------------------------------------------

  Prediction summarize(const SimOptions& o) const {
    Prediction p;
    p.hosts = topo_.hosts;
    p.ranks = topo_.ranks();
    p.algorithm = algorithm_name(alg_);
    const size_t n = size_t(o.steps);
    for (size_t s = 0; s < n; ++s) p.step_times.push_back(steps_[s + 1].start - steps_[s].start);
    double comm = 0, nic = 0, shm = 0, cycles = 0, groups = 0, total = 0;
    for (size_t s = size_t(o.warmup); s < n; ++s) {
      const StepStats& x = steps_[s];
      total += p.step_times[s];
      comm += x.comm_s;
      nic += x.nic_bytes;
      shm += x.shm_bytes;
      cycles += x.cycles;
      groups += x.collectives;
    }
    const double k = double(n - size_t(o.warmup));
    p.step_s = total / k;
    p.comm_s = comm / k;
    p.cycles = cycles / k;
    p.collectives = groups / k;
    p.nic_utilisation = total > 0 ? nic / topo_.network.bytes_per_s / total : 0;
    p.shm_utilisation = total > 0 ? shm / topo_.shm_for(topo_.ranks_per_host).bytes_per_s / total : 0;
    const double alone = share(R_ * T_) / ref_share_ / straggle_;
    p.compute_s = (compute_end_work_ + update_work_) / alone;
    p.single_rank_s = compute_end_work_ + update_work_;
    p.exposed_s = p.step_s - p.compute_s;
    p.efficiency = p.single_rank_s / p.step_s;
    return p;
  }

  const Topology& topo_;
  const Workload& wl_;
  const Strategy& st_;
  Algorithm alg_;
  std::vector<Op> ops_;
  std::vector<size_t> gates_;  // ops with a needed_work, by it
  std::vector<int> slot_;
  size_t next_slot_ = 0;
  double compute_end_work_ = 0, update_work_ = 0;
  double R_ = 1, T_ = 1, ref_share_ = 1, straggle_ = 1, elem_bytes_ = 4;

  double now_ = 0;
  enum class Phase { compute, wait, update } phase_ = Phase::compute;
  double work_ = 0;
  size_t next_submit_ = 0;
  size_t done_count_ = 0;
  std::vector<double> submitted_at_;
  std::vector<bool> taken_, done_;
  std::vector<StepStats> steps_;

  enum class EngineState { waiting, busy, asleep } es_ = EngineState::waiting;
  double next_cycle_at_ = 0;
  double cycle_start_ = 0;
  double last_busy_ = 0;
  double wake_at_ = kNever;
  bool cycle_idle_ = true;
  bool idle_until_submission_ = false;  // waiting: a submission starts the next cycle
  std::deque<Task> tasks_;
  std::vector<size_t> cycle_ops_;
  std::vector<engine::ReadyOp> ready_;
  std::vector<engine::FusionGroup> fusion_;
  std::vector<std::vector<size_t>> groups_;
};

// Synchronous parameter servers: no engine, no overlap (see simulator.h),
// so a step is the sum of its parts and every step is the same.
Prediction simulate_parameter_server(const Topology& t, const Workload& w, const Strategy& s, const SimOptions& o) {
  COHORT_CHECK_AS(ConfigError, o.steps > o.warmup && o.warmup >= 0) << "need more simulated steps than warm-up steps";
  COHORT_CHECK_AS(ConfigError, !s.compress_fp16) << "parameter servers exchange gradients uncompressed";
  const int servers = s.ps_servers, workers = t.ranks() - servers;
  const Cost exchange = parameter_server_exchange_cost(t, servers, w.total_bytes());
  // The workers' compute threads share the cores of their machine (the
  // busiest host holds min(ranks_per_host, workers) of them: hosts fill
  // from rank 0); servers wait for them meanwhile.
  const int on_machine = t.one_machine ? workers : std::min(t.ranks_per_host, workers);
  auto share = [&](double runnable) { return core_share(t, runnable); };
  const double slowdown = share(w.threads) / share(double(on_machine) * w.threads) * slowest_rank_factor(t, w, workers);
  // A server sums its part of every worker's push, and updates that part
  // with its own optimizer, or (the program's optimizer) leaves the update
  // to every worker after the pull.
  const double part = w.total_bytes() / servers;
  const double serve = double(workers) * part / t.reduce_bytes_per_s + (s.ps_servers_update ? w.update_s / servers : 0);
  const double update = s.ps_servers_update ? 0 : w.update_s;
  Prediction p;
  p.hosts = t.hosts;
  p.ranks = t.ranks();
  p.algorithm = "parameter_server";
  p.compute_s = w.compute_end_s * slowdown;
  p.single_rank_s = w.compute_end_s + w.update_s;
  p.comm_s = 2 * exchange.seconds + serve;
  p.step_s = p.compute_s + p.comm_s + update * slowdown;
  p.compute_s += update * slowdown;
  p.exposed_s = p.step_s - p.compute_s;
  p.efficiency = p.single_rank_s / p.step_s;
  p.nic_utilisation = 2 * exchange.nic_bytes / t.network.bytes_per_s / p.step_s;
  p.collectives = 2.0 * servers;  // a push and a pull per server
  p.step_times.assign(size_t(o.steps), p.step_s);
  return p;
}

}  // namespace

Mode mode_from_name(const std::string& name) {
  if (name == "horovod") return Mode::horovod;
  if (name == "ddp") return Mode::ddp;
  if (name == "zero") return Mode::zero;
  if (name == "parameter_server") return Mode::parameter_server;
  COHORT_THROW(ConfigError) << "unknown mode '" << name << "' (horovod, ddp, zero, parameter_server)";
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::horovod: return "horovod";
    case Mode::ddp: return "ddp";
    case Mode::zero: return "zero";
    case Mode::parameter_server: return "parameter_server";
  }
  return "?";
}

Prediction simulate(const Topology& topology, const Workload& workload, const Strategy& strategy,
                    const SimOptions& options) {
  if (strategy.mode == Mode::parameter_server) return simulate_parameter_server(topology, workload, strategy, options);
  return Simulation(topology, workload, strategy).run(options);
}

}  // namespace cohort::sim
