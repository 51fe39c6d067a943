#include "tools/plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "cohort/common/check.h"
#include "cohort/engine/autotune.h"
#include "tools/plan/format.h"
#include "tools/sim/simulator.h"

namespace cohort::plan {

const char* family_name(Family f) {
  switch (f) {
    case Family::one_device: return "one_device";
    case Family::horovod: return "horovod";
    case Family::ddp: return "ddp";
    case Family::zero: return "zero";
    case Family::parameter_server: return "parameter_server";
    case Family::mesh: return "mesh";
  }
  return "?";
}

std::string strategy_spec(const PlanConfig& c) {
  switch (c.family) {
    case Family::one_device: return "one_device";
    case Family::horovod: return "multi_worker:style=horovod";
    case Family::ddp: return "multi_worker:style=ddp,bucket_mb=" + std::to_string(c.bucket_mb);
    case Family::zero:
      return "zero:stage=" + std::to_string(c.zero_stage) + ",bucket_mb=" + std::to_string(c.bucket_mb) +
             (c.zero_stage == 3 ? ",unit_mb=" + std::to_string(c.unit_mb) : "");
    case Family::parameter_server: return "parameter_server:servers=" + std::to_string(c.servers);
    case Family::mesh: return c.mesh_zero ? "zero:stage=1" : "multi_worker:style=ddp";
  }
  return "";
}

std::string launch_backend(const PlanConfig& c) {
  if (c.family == Family::one_device) return "";
  if (c.backend == "ring") return "gloo";
  if (c.backend == "shm" || c.backend == "hierarchical") return c.backend;
  return "";
}

std::vector<std::pair<std::string, std::string>> plan_env(const PlanConfig& c) {
  if (c.family == Family::one_device || c.family == Family::parameter_server) return {};
  return {{"COHORT_FUSION_THRESHOLD", std::to_string(c.fusion_threshold)},
          {"COHORT_CYCLE_TIME_US", std::to_string(c.cycle_time_us)}};
}

namespace {

std::string size_text(int64_t b) {
  if (b == 0) return "0";
  if (b % (1 << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b % (1 << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

std::string describe(const PlanConfig& c) {
  std::string s;
  if (c.family == Family::mesh) {
    s = "mesh dp" + std::to_string(c.mesh.dp) + " pp" + std::to_string(c.mesh.pp) + " tp" + std::to_string(c.mesh.tp) +
        " mb" + std::to_string(c.mesh.micro_batches) + (c.mesh_zero ? " zero1" : "");
  } else {
    s = strategy_spec(c);
    if (c.family != Family::one_device && c.family != Family::parameter_server) s += " " + launch_backend(c);
  }
  if (c.family == Family::horovod) s += " fusion " + size_text(c.fusion_threshold);
  // Only the families whose knobs are tuned get a cycle time.
  if (c.cycle_time_us) s += " cycle " + std::to_string(c.cycle_time_us) + "us";
  return s;
}

ServerMemory parameter_server_memory(const Profile& p, double examples) {
  return {
      .worker = p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes + p.activation_bytes_per_example * examples,
      .server_model = p.parameter_bytes + p.gradient_bytes};
}

double memory_per_rank(const Profile& p, const PlanConfig& c, double examples) {
  const double P = p.parameter_bytes, G = p.gradient_bytes, O = p.optimizer_bytes;
  const double act = p.activation_bytes_per_example * examples;
  const double N = c.ranks();
  switch (c.family) {
    case Family::one_device: return P + G + O + act;
    case Family::horovod: return P + G + O + act + double(c.fusion_threshold);
    case Family::ddp: return P + G + O + act;
    case Family::zero: {
      const double bucket = double(c.bucket_mb) * (1 << 20);
      if (c.zero_stage == 1) return P + G + O / N + act;
      if (c.zero_stage == 2) return P + G / N + O / N + std::min(G, bucket) + act;
      // Stage 3: the shards, plus the unit in use and the one prefetched
      // (whole), and that unit's gradient before its reduce-scatter.
      double largest = 0;
      std::map<std::string, double> units;
      for (const sim::Tensor& t : p.step.workload.tensors)
        units[t.unit.empty() ? sim::unit_of(t.name) : t.unit] += t.bytes;
      for (const auto& [name, bytes] : units) largest = std::max(largest, bytes);
      const double unit = std::max(double(c.unit_mb) * (1 << 20), largest) * (P / p.step.workload.total_bytes());
      // A program builds its model whole before prepare() shards it (cohort's
      // zero strategy takes a built module), so every rank holds P and its
      // shard once, at the start: a memory limit below that fails there.
      return std::max((P + G + O) / N + std::min(P, 3 * unit) + act, P + P / N);
    }
    case Family::parameter_server: {
      const ServerMemory m = parameter_server_memory(p, examples);
      return std::max(m.worker, m.server(c.servers));
    }
    case Family::mesh: {
      const double split = double(c.mesh.pp) * c.mesh.tp;
      const double micro = examples / c.mesh.micro_batches;  // examples = the replica's batch
      return (P + G) / split + O / (split * (c.mesh_zero ? c.mesh.dp : 1)) +
             p.activation_bytes_per_example / split * micro * sim::micro_batches_in_flight(c.mesh);
    }
  }
  return 0;
}

namespace {

// What tells two configurations apart: the machines, and describe()'s
// family, backend and knobs plus the knobs it leaves out.
std::string key_of(const PlanConfig& c) {
  return std::to_string(c.type) + "/" + std::to_string(c.machines) + "/" + std::to_string(c.ranks_per_machine) + "/" +
         describe(c) + "/" + std::to_string(c.bucket_mb) + "/" + std::to_string(c.unit_mb) + "/" +
         std::to_string(c.fusion_threshold);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Searcher {
 public:
  Searcher(const Profile& p, const Catalogue& c, const Job& j, const SearchOptions& o)
      : profile_(p), catalogue_(c), job_(j), opt_(o) {
    COHORT_CHECK_AS(ConfigError, j.global_batch >= 1) << "the global batch must be at least 1 (--global-batch)";
    COHORT_CHECK_AS(ConfigError, j.steps >= 1)
        << "the job needs at least one step (--steps, or --epochs and --examples)";
    auto check_step = [&](const Step& s, const std::string& where) {
      COHORT_CHECK_AS(ConfigError, !s.workload.tensors.empty()) << p.path << ": " << where << " has no tensors";
      COHORT_CHECK_AS(ConfigError, s.workload.compute_end_s > 0)
          << p.path << ": " << where << " has no compute time (its last gradient is ready at 0 s)";
    };
    check_step(p.step, "the profile's workload");
    for (const auto& [family, s] : p.family_steps) check_step(s, "the workload of families." + family);
    for (const std::string& s : o.strategies)
      COHORT_CHECK_AS(ConfigError, std::set<std::string>({"one_device", "horovod", "ddp", "zero", "parameter_server",
                                                          "mesh", "mesh_zero"})
                                       .contains(s))
          << "--strategies: unknown '" << s << "' (one_device, horovod, ddp, zero, parameter_server, mesh, mesh_zero)";
    for (const MachineType& m : c.types)
      COHORT_CHECK_AS(ConfigError, m.flop_per_s == 0 || p.flop_per_example > 0)
          << c.path << ": machine type '" << m.name << "' states flop_per_s, but " << p.path
          << " has no flop_per_example to divide by it (add it, or give compute_speedup)";
  }

  Result run() {
    const auto t0 = std::chrono::steady_clock::now();
    enumerate();
    // Step 2: the best of step 1 again over the engine's knobs.
    std::vector<size_t> idx = ranked_indices();
    std::vector<Plan> tuned;
    int taken = 0;
    for (size_t i : idx) {
      if (taken >= opt_.tune_top) break;
      const Plan& p = plans_[i];
      if (!p.fits || !p.over.empty()) continue;
      if (p.config.family == Family::one_device || p.config.family == Family::parameter_server) continue;
      ++taken;
      // A variant already evaluated (each plan's own knobs are among its
      // variants) is not simulated again.
      for (const PlanConfig& v : knob_variants(p.config))
        if (first_seen(v)) tuned.push_back(evaluate(v));
    }
    for (Plan& p : tuned) keep(std::move(p));
    Result r;
    for (size_t i : ranked_indices()) r.plans.push_back(plans_[i]);
    for (size_t i = 0; i < r.plans.size(); ++i) r.plans[i].id = int(i) + 1;
    r.simulations = simulations_;
    pareto(r);
    r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check_feasible(r);
    return r;
  }

 private:
  // Rank compute relative to the profiled machine's (seconds per example
  // here over seconds per example there), from the program's step: a
  // family's own step keeps its difference on every machine.
  double slowness(const MachineType& m) const {
    const double ref = profile_.step.workload.compute_end_s / profile_.step.batch_per_rank;
    if (m.flop_per_s > 0) return profile_.flop_per_example / m.flop_per_s / ref;
    return 1 / m.compute_speedup;
  }

  // The step of plan c's family at `examples` per rank on machine type m,
  // with the ranks of topology t sharing each machine's cores: compute as
  // the profile says it grows with the examples (in proportion, or a fixed
  // part and the rest in proportion), the update with the machine's speed
  // only, both slowed as ranks sharing a machine slow each other (the
  // profile's "shared"), whose step-to-step jitter is then the shared
  // run's.
  sim::Workload rank_workload(const MachineType& m, double examples, const PlanConfig& c,
                              const sim::Topology& t) const {
    const Step& step = profile_.step_of(family_name(c.family));
    const int sharing = t.ranks_per_machine();
    const double s = slowness(m) * profile_.sharing_factor(sharing, examples);
    sim::Workload w = sim::scaled_compute(step.workload, s * step.compute_s(examples) / step.workload.compute_end_s);
    w.update_s = step.workload.update_s * s;
    if (sharing > 1 && !profile_.shared.workload.step_periods_s.empty())
      w.step_periods_s = profile_.shared.workload.step_periods_s;
    return w;
  }

  sim::Topology topology(const PlanConfig& c) const {
    sim::Topology t = catalogue_.types[c.type].topology;
    t.hosts = c.machines;
    t.ranks_per_host = c.ranks_per_machine;
    return t;
  }

  // Whether `c` is new to the search (and now seen): the same
  // configuration is evaluated and listed once.
  bool first_seen(const PlanConfig& c) { return seen_.insert(key_of(c)).second; }

  void keep(Plan p) {
    p.order = plans_.size();
    plans_.push_back(std::move(p));
  }

  void enumerate() {
    for (size_t ti = 0; ti < catalogue_.types.size(); ++ti) {
      const MachineType& m = catalogue_.types[ti];
      std::set<int> counts;
      const int most = std::min(m.available, opt_.max_machines);
      for (int n = 1; n <= most; n *= 2) counts.insert(n);
      counts.insert(most);
      if (opt_.machines > 0) counts = opt_.machines <= m.available ? std::set<int>{opt_.machines} : std::set<int>{};
      for (int machines : counts)
        for (int rpm : m.ranks_per_machine) {
          if (opt_.ranks_per_machine > 0 && rpm != opt_.ranks_per_machine) continue;
          for (const PlanConfig& c : families(ti, machines, rpm))
            if (first_seen(c)) keep(evaluate(c));
        }
    }
    COHORT_CHECK_AS(ConfigError, !plans_.empty())
        << "no plan to try (--machines " << opt_.machines << ", --ranks-per-machine " << opt_.ranks_per_machine
        << ", --strategies against the catalogue's available machines and cores, and the profile's stages)";
  }

  bool allowed(const std::string& family) const {
    return opt_.strategies.empty() ||
           std::find(opt_.strategies.begin(), opt_.strategies.end(), family) != opt_.strategies.end();
  }

  std::vector<PlanConfig> families(size_t ti, int machines, int rpm) const {
    std::vector<PlanConfig> all = every_family(ti, machines, rpm), out;
    for (const PlanConfig& c : all)
      if (allowed(c.family == Family::mesh && c.mesh_zero ? "mesh_zero" : family_name(c.family))) out.push_back(c);
    return out;
  }

  std::vector<PlanConfig> every_family(size_t ti, int machines, int rpm) const {
    std::vector<PlanConfig> out;
    PlanConfig base;
    base.type = ti;
    base.machines = machines;
    base.ranks_per_machine = rpm;
    const int N = machines * rpm;
    if (N == 1) {
      out.push_back(base);
      return out;
    }
    std::vector<std::string> backends;
    if (machines == 1) backends = {"shm"};
    else if (rpm == 1) backends = {"ring"};
    else backends = {"ring", "hierarchical"};
    for (const std::string& b : backends) {
      PlanConfig c = base;
      c.backend = b;
      c.family = Family::horovod;
      out.push_back(c);
      c.family = Family::ddp;
      out.push_back(c);
      c.family = Family::zero;
      for (int s = 1; s <= 3; ++s) {
        c.zero_stage = s;
        out.push_back(c);
      }
    }
    for (int s = 1; s <= std::min(N / 2, 64); s *= 2) {
      PlanConfig c = base;
      c.family = Family::parameter_server;
      c.backend = "auto";
      c.servers = s;
      out.push_back(c);
    }
    const Stages& st = profile_.stages;
    if (st.layers > 0) {
      for (int tp = 1; tp <= rpm; tp *= 2) {
        if (rpm % tp || (st.heads > 0 && st.heads % tp)) continue;
        for (int pp = 1; pp <= st.layers; ++pp) {
          if (st.layers % pp || N % (tp * pp)) continue;
          if (tp == 1 && pp == 1) continue;  // plain data parallelism: the families above
          const int dp = N / (tp * pp);
          if (dp > job_.global_batch) continue;
          const int64_t replica = ceil_div(job_.global_batch, dp);
          std::set<int64_t> ms;
          if (pp == 1) ms.insert(1);
          else
            for (int64_t micro = 1; micro <= replica; micro *= 2) ms.insert(ceil_div(replica, micro));
          for (int64_t m : ms)
            for (int z = 0; z <= (dp > 1 ? 1 : 0); ++z) {
              PlanConfig c = base;
              c.family = Family::mesh;
              c.backend = "auto";
              c.mesh = {.dp = dp, .pp = pp, .tp = tp, .micro_batches = int(m)};
              c.mesh_zero = z;
              out.push_back(c);
            }
        }
      }
    }
    return out;
  }

  std::vector<PlanConfig> knob_variants(const PlanConfig& c) const {
    std::vector<PlanConfig> out;
    const engine::AutotuneOptions grid;
    for (int64_t cycle : grid.cycle_times_us) {
      PlanConfig v = c;
      v.cycle_time_us = cycle;
      switch (c.family) {
        case Family::horovod:
          for (int64_t f : grid.fusion_thresholds) {
            v.fusion_threshold = f;
            out.push_back(v);
          }
          break;
        case Family::ddp:
          for (int b : {1, 5, 25, 100}) {
            v.bucket_mb = b;
            out.push_back(v);
          }
          break;
        case Family::zero:
          if (c.zero_stage == 3)
            for (int u : {1, 4, 16}) {
              v.unit_mb = u;
              out.push_back(v);
            }
          else
            for (int b : {5, 25, 100}) {
              v.bucket_mb = b;
              out.push_back(v);
            }
          break;
        case Family::mesh: out.push_back(v); break;
        default: break;
      }
    }
    return out;
  }

  sim::Strategy sim_strategy(const PlanConfig& c) const {
    sim::Strategy s;
    s.backend = c.backend;
    s.fusion_threshold_bytes = c.fusion_threshold;
    s.cycle_time_s = double(c.cycle_time_us) * 1e-6;
    s.bucket_bytes = int64_t(c.bucket_mb) << 20;
    s.unit_bytes = int64_t(c.unit_mb) << 20;
    switch (c.family) {
      case Family::one_device:
      case Family::horovod: s.mode = sim::Mode::horovod; break;
      case Family::ddp: s.mode = sim::Mode::ddp; break;
      case Family::zero:
        s.mode = sim::Mode::zero;
        s.zero_stage = c.zero_stage;
        break;
      case Family::parameter_server:
        s.mode = sim::Mode::parameter_server;
        s.ps_servers = c.servers;
        break;
      case Family::mesh:
        s.mode = c.mesh_zero ? sim::Mode::zero : sim::Mode::ddp;
        s.zero_stage = 1;
        break;
    }
    return s;
  }

  Plan evaluate(const PlanConfig& c) {
    Plan p;
    p.config = c;
    const MachineType& m = catalogue_.types[c.type];
    const int N = c.ranks();
    const int replicas = c.family == Family::mesh               ? c.mesh.dp
                         : c.family == Family::parameter_server ? N - c.servers
                                                                : N;
    const double examples = double(ceil_div(job_.global_batch, replicas));
    if (replicas > job_.global_batch) {
      p.fits = false;
      p.why_not = std::to_string(replicas) + " replicas for a global batch of " + std::to_string(job_.global_batch) +
                  ": some would have no examples";
      return p;
    }
    // Memory: the busiest machine's ranks, and every rank's own memory.
    p.memory_per_rank = memory_per_rank(profile_, c, examples);
    double machine = p.memory_per_rank * c.ranks_per_machine;
    if (c.family == Family::parameter_server) {
      // The servers are the last ranks: the last machine holds the most.
      const ServerMemory ps = parameter_server_memory(profile_, examples);
      const double worker = ps.worker, server = ps.server(c.servers);
      const int servers_last = std::min(c.servers, c.ranks_per_machine);
      machine =
          std::max(worker * c.ranks_per_machine, servers_last * server + (c.ranks_per_machine - servers_last) * worker);
    }
    if (m.memory_bytes_per_rank > 0 && p.memory_per_rank > m.memory_bytes_per_rank) {
      p.fits = false;
      p.why_not = "needs " + bytes_text(p.memory_per_rank) + " per rank, " + m.name + " has " +
                  bytes_text(m.memory_bytes_per_rank) + " per rank";
      return p;
    }
    if (m.memory_bytes > 0 && machine > m.memory_bytes) {
      p.fits = false;
      p.why_not = "needs " + bytes_text(machine) + " on a machine (" + std::to_string(c.ranks_per_machine) +
                  " ranks of up to " + bytes_text(p.memory_per_rank) + "), " + m.name + " has " +
                  bytes_text(m.memory_bytes);
      return p;
    }
    const sim::Topology t = topology(c);
    sim::SimOptions so{.steps = opt_.sim_steps, .warmup = 1};
    ++simulations_;
    if (c.family == Family::mesh) {
      const sim::Workload w = rank_workload(m, examples, c, t);
      const Stages& st = profile_.stages;
      sim::MeshModel model{.layers = st.layers,
                           .compute_s = w.compute_end_s,
                           .update_s = w.update_s,
                           .boundary_bytes = st.boundary_bytes_per_example * examples,
                           .tp_bytes = st.tp_bytes_per_example * examples,
                           .tp_allreduces_per_layer = st.tp_allreduces_per_layer};
      const sim::MeshPrediction mp = sim::predict_mesh(t, w, model, c.mesh, sim_strategy(c), so);
      p.step_s = mp.step_s;
      // The dp sync crosses the NIC when a dp group spans machines, else
      // the host's shm bus; with one replica it is the update alone.
      const char* dp_on = c.mesh.dp == 1 ? "compute" : mp.dp_across_hosts ? "network" : "memory bandwidth";
      p.parts = {{"compute", mp.compute_s, "compute"},
                 {"pipeline bubble", mp.bubble_s, "pipeline bubble"},
                 {"tensor-parallel allreduces", mp.tp_s, "intra-host link"},
                 mp.p2p_across_hosts ? StepPart{"stage transfers (network)", mp.p2p_s, "network"}
                                     : StepPart{"stage transfers (intra-host)", mp.p2p_s, "intra-host link"},
                 {"dp gradient sync and update", mp.dp_exposed_s, dp_on}};
    } else {
      const sim::Prediction sp = sim::simulate(t, rank_workload(m, examples, c, t), sim_strategy(c), so);
      p.step_s = sp.step_s;
      StepPart comm{"exposed communication", sp.exposed_s, "memory bandwidth"};
      if (c.family == Family::parameter_server) {
        comm.name = "parameter servers (push, sum, pull)";
        comm.bottleneck = "server";
      } else if (c.machines > 1 && sp.nic_utilisation >= sp.shm_utilisation) {
        comm.name += " (network)";
        comm.bottleneck = "network";
      } else if (N > 1) {
        comm.name += " (memory bandwidth)";
      }
      p.parts = {{"compute", sp.compute_s, "compute"}, comm};
    }
    std::stable_sort(p.parts.begin(), p.parts.end(),
                     [](const StepPart& a, const StepPart& b) { return a.seconds > b.seconds; });
    p.bottleneck = p.parts[0].bottleneck;
    p.total_s = p.step_s * double(job_.steps);
    p.cost = double(c.machines) * m.price_per_hour * p.total_s / 3600;
    if (p.cost > opt_.budget_usd)
      p.over = "costs " + money_text(p.cost) + ", over the budget of " + money_text(opt_.budget_usd);
    else if (p.total_s > opt_.deadline_s)
      p.over = "takes " + duration_text(p.total_s) + ", past the deadline of " + duration_text(opt_.deadline_s);
    return p;
  }

  // Plans in ranking order (indices into plans_).
  std::vector<size_t> ranked_indices() const {
    std::vector<size_t> idx(plans_.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    const bool by_time = opt_.objective == Objective::time;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      const Plan& x = plans_[a];
      const Plan& y = plans_[b];
      const int cx = !x.fits ? 2 : !x.over.empty() ? 1 : 0;
      const int cy = !y.fits ? 2 : !y.over.empty() ? 1 : 0;
      if (cx != cy) return cx < cy;
      if (cx == 2) return x.order < y.order;
      const double x1 = by_time ? x.total_s : x.cost, y1 = by_time ? y.total_s : y.cost;
      if (x1 != y1) return x1 < y1;
      const double x2 = by_time ? x.cost : x.total_s, y2 = by_time ? y.cost : y.total_s;
      if (x2 != y2) return x2 < y2;
      return x.order < y.order;
    });
    return idx;
  }

  void pareto(Result& r) const {
    std::vector<const Plan*> fit;
    for (const Plan& p : r.plans)
      if (p.fits) fit.push_back(&p);
    std::stable_sort(fit.begin(), fit.end(), [](const Plan* a, const Plan* b) {
      return a->total_s != b->total_s ? a->total_s < b->total_s : a->cost < b->cost;
    });
    double cheapest = kUnlimited;
    for (const Plan* p : fit)
      if (p->cost < cheapest) {
        cheapest = p->cost;
        r.pareto.push_back(p->id);
      }
  }

  void check_feasible(const Result& r) const {
    const Plan& best = r.plans.front();
    if (best.fits && best.over.empty()) return;
    if (!best.fits) {
      // Nothing fits in memory: the plan that came closest.
      const Plan* least = &r.plans.front();
      for (const Plan& p : r.plans)
        if (p.memory_per_rank > 0 && (least->memory_per_rank == 0 || p.memory_per_rank < least->memory_per_rank))
          least = &p;
      if (least->memory_per_rank == 0)
        COHORT_THROW(ConfigError) << "no plan fits: " << least->why_not << " (plan " << least->id << ": "
                                  << describe(least->config) << ")";
      COHORT_THROW(ConfigError) << "no plan fits in memory: the least memory any plan needs is "
                                << bytes_text(least->memory_per_rank) << " per rank (" << describe(least->config)
                                << " on " << least->config.machines << " x "
                                << catalogue_.types[least->config.type].name << ", " << least->why_not << ")";
    }
    const Plan* cheapest = nullptr;
    const Plan* fastest = nullptr;
    for (const Plan& p : r.plans) {
      if (!p.fits) continue;
      if (!cheapest || p.cost < cheapest->cost) cheapest = &p;
      if (!fastest || p.total_s < fastest->total_s) fastest = &p;
    }
    auto name = [&](const Plan& p) {
      return "plan " + std::to_string(p.id) + ": " + std::to_string(p.config.machines) + " x " +
             catalogue_.types[p.config.type].name + ", " + describe(p.config) + ", " + duration_text(p.total_s) + ", " +
             money_text(p.cost);
    };
    const bool budget_binds = cheapest->cost > opt_.budget_usd;
    const bool deadline_binds = fastest->total_s > opt_.deadline_s;
    if (budget_binds)
      COHORT_THROW(ConfigError) << "no plan fits the budget of " << money_text(opt_.budget_usd)
                                << ": the cheapest plan that fits in memory costs " << money_text(cheapest->cost)
                                << " (" << name(*cheapest) << ")";
    if (deadline_binds)
      COHORT_THROW(ConfigError) << "no plan meets the deadline of " << duration_text(opt_.deadline_s)
                                << ": the fastest plan that fits in memory takes " << duration_text(fastest->total_s)
                                << " (" << name(*fastest) << ")";
    // Each alone can be met, not both.
    const Plan* fastest_in_budget = nullptr;
    for (const Plan& p : r.plans)
      if (p.fits && p.cost <= opt_.budget_usd && (!fastest_in_budget || p.total_s < fastest_in_budget->total_s))
        fastest_in_budget = &p;
    COHORT_THROW(ConfigError) << "no plan meets both the budget of " << money_text(opt_.budget_usd)
                              << " and the deadline of " << duration_text(opt_.deadline_s)
                              << ": within the budget the fastest takes " << duration_text(fastest_in_budget->total_s)
                              << " (" << name(*fastest_in_budget) << "); the deadline alone needs "
                              << money_text(cheapest_meeting_deadline(r)->cost);
  }

  const Plan* cheapest_meeting_deadline(const Result& r) const {
    const Plan* c = nullptr;
    for (const Plan& p : r.plans)
      if (p.fits && p.total_s <= opt_.deadline_s && (!c || p.cost < c->cost)) c = &p;
    return c;
  }

  const Profile& profile_;
  const Catalogue& catalogue_;
  const Job job_;
  const SearchOptions opt_;
  std::vector<Plan> plans_;
  std::set<std::string> seen_;
  size_t simulations_ = 0;
};

}  // namespace

Result search(const Profile& profile, const Catalogue& catalogue, const Job& job, const SearchOptions& options) {
  return Searcher(profile, catalogue, job, options).run();
}

}  // namespace cohort::plan
