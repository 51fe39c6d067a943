// cohort-sim: predicts the step time and scaling of data-parallel training
// with cohort on a cluster described by a topology file, from a workload (a
// timeline of a real run, or a model description). See tools/sim/README.md.
//
//   cohort-sim predict --topology T.json --workload W.json [--ranks 2,4,8] [strategy flags]
//                      [--json OUT.json] [--plot OUT.png]
//   cohort-sim workload --timeline TRACE.json [--out W.json]
//   cohort-sim fit --csv BENCH.csv --topology T.json --algorithm shm|ring|hierarchical --link shm|intra|network
//                  [--cpu]
//   cohort-sim plot --out F.png [--title T] [--x-label L] [--y-label L] [--metric efficiency|step_ms]
//                   --series LABEL=PREDICTIONS.json ... [--points LABEL=x:y,x:y ...]
//
// Exit status: 0 success, 1 a runtime failure, 2 bad flags or input files.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/engine/autotune.h"
#include "cohort/plot/figure.h"
#include "cohort/common/flags.h"
#include "tools/sim/calibration.h"
#include "tools/sim/fields.h"
#include "tools/sim/simulator.h"
#include "tools/sim/timeline_workload.h"

namespace {

using namespace cohort;
using namespace cohort::sim;

constexpr const char* kUsage = R"(usage:
  cohort-sim predict --topology T.json --workload W.json [options]
      --ranks LIST          rank counts to predict, e.g. 1,2,4,8 or 8,16,32,64,128,256,512: up to the
                            topology's ranks_per_host on one host, beyond it whole hosts (default: the
                            topology's hosts x ranks_per_host)
      --mode M              horovod (named per-tensor allreduces, fused), ddp (buckets), zero (ZeRO's
                            reduce-scatters and allgathers) or parameter_server (synchronous push and pull)
                            (horovod)
      --zero-stage N        1, 2 or 3 (1)
      --unit-bytes B        zero stage 3: layers (tensors' units) joined into units of this much (1M)
      --ps-servers N        parameter_server: how many of the ranks serve (the last ones) (1)
      --ps-optimizer O      parameter_server: program (servers sum, workers update) or servers (program)
      --backend B           auto, shm, ring, hierarchical (auto: shm on one host, else hierarchical)
      --fusion-threshold B  engine fusion threshold in bytes, K/M/G suffixes (256K)
      --cycle-time-us N     minimum period of the engine's cycles (0: back to back)
      --linger-us N         idle cycling before the engine sleeps (1000)
      --cache-capacity N    response cache slots (1024)
      --first-bucket-bytes B, --bucket-bytes B   DDP bucket caps (1M, 25M); zero's buckets: --bucket-bytes
      --compression C       none or fp16 (gradients travel as 2-byte floats)
      --negotiation N       cohort (allgather of cycle records) or tree (Horovod's gather + broadcast)
      --steps N             simulated steps, the first left out (6)
      --json FILE           write the predictions as JSON
      --plot FILE           draw scaling efficiency against ranks (PNG)
      --title T             the plot's title
  cohort-sim workload --timeline TRACE.json [--out W.json] [--first OP]
      the steady-state step of a real run's timeline (COHORT_TIMELINE) as a workload file; OP: the
      step's first gradient (default: the op after the longest wait, usually the forward pass)
  cohort-sim fit --csv BENCH.csv --topology T.json --algorithm A --link L [--collective C]
      fits link L (shm, intra, network) of the topology to cohort-bench --csv rows of collective C
      (allreduce, reduce_scatter, allgather; default allreduce) under algorithm A; the topology's
      ranks_per_host and hosts must match the run. --cpu: the rows' time is the CPU a rank spent
      per allreduce, and the network link's cpu_step_s and cpu_s_per_byte are fitted
  cohort-sim plot --out F.png --series LABEL=PRED.json [--series ...] [--points LABEL=x:y,x:y]
      [--metric efficiency|step_ms] [--title T] [--x-label L] [--y-label L] [--log-x]
  cohort-sim autotune --topology T.json --workload W.json [--mode M] [--backend B] [--noise F] [--seeds N]
      the engine's autotuner (both search methods) on the simulated step-time surface over its grid,
      each step's time multiplied by 1 + U(0, F) (default 0.05): steps to converge and the chosen
      setting's step time against the best of the grid
)";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// "256K", "64M", "1G", "4096": K/M/G are powers of 1024.
int64_t parse_size(const std::string& flag, const std::string& text) {
  COHORT_CHECK_AS(ConfigError, !text.empty()) << flag << " expects a byte count such as 4096, 256K or 64M";
  int shift = 0;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    default: break;
  }
  if (shift) digits.pop_back();
  const auto v = flags::parse_number<int64_t>(flag, digits, int64_t{0});
  COHORT_CHECK_AS(ConfigError, v <= (int64_t{1} << 50) >> shift) << flag << " '" << text << "' is too large";
  return v << shift;
}

std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1 << 30));
  else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string prediction_json(const Prediction& p) {
  std::ostringstream os;
  os.precision(9);
  os << "{\"ranks\": " << p.ranks << ", \"hosts\": " << p.hosts << ", \"algorithm\": \"" << p.algorithm
     << "\", \"step_s\": " << p.step_s << ", \"compute_s\": " << p.compute_s << ", \"single_rank_s\": "
     << p.single_rank_s << ", \"exposed_s\": " << p.exposed_s << ", \"efficiency\": " << p.efficiency
     << ", \"comm_s\": " << p.comm_s << ", \"nic_utilisation\": " << p.nic_utilisation << ", \"shm_utilisation\": "
     << p.shm_utilisation << ", \"cycles\": " << p.cycles << ", \"collectives\": " << p.collectives
     << ", \"step_times_s\": [";
  for (size_t i = 0; i < p.step_times.size(); ++i) os << (i ? ", " : "") << p.step_times[i];
  os << "]}";
  return os.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  COHORT_CHECK_AS(ConfigError, out.good()) << "cannot write '" << path << "'";
  out << text;
  out.close();
  COHORT_CHECK_AS(ConfigError, out.good()) << "cannot write '" << path << "'";
}

// ---- predict ----------------------------------------------------------------

int predict(const std::vector<std::string>& args) {
  std::string topology_path, workload_path, json_path, plot_path, title, ranks_list;
  Strategy st;
  SimOptions so;
  flags::parse_flags(
      args,
      {{"--topology", [&](auto&, auto& v) { topology_path = v; }},
       {"--workload", [&](auto&, auto& v) { workload_path = v; }},
       {"--ranks", [&](auto&, auto& v) { ranks_list = v; }},
       {"--mode", [&](auto& f, auto& v) {
          st.mode = mode_from_name(flags::one_of(f, v, {"horovod", "ddp", "zero", "parameter_server"}));
        }},
       {"--zero-stage", [&](auto& f, auto& v) { st.zero_stage = flags::parse_number<int>(f, v, 1); }},
       {"--unit-bytes", [&](auto& f, auto& v) { st.unit_bytes = std::max<int64_t>(1, parse_size(f, v)); }},
       {"--ps-servers", [&](auto& f, auto& v) { st.ps_servers = flags::parse_number<int>(f, v, 1); }},
       {"--ps-optimizer", [&](auto& f, auto& v) {
          st.ps_servers_update = flags::one_of(f, v, {"program", "servers"}) == "servers";
        }},
       {"--backend", [&](auto& f, auto& v) { st.backend = flags::one_of(f, v, {"auto", "shm", "ring", "hierarchical"}); }},
       {"--fusion-threshold", [&](auto& f, auto& v) { st.fusion_threshold_bytes = parse_size(f, v); }},
       {"--cycle-time-us", [&](auto& f, auto& v) { st.cycle_time_s = flags::parse_number<double>(f, v, 0.0) * 1e-6; }},
       {"--linger-us", [&](auto& f, auto& v) { st.linger_s = flags::parse_number<double>(f, v, 0.0) * 1e-6; }},
       {"--cache-capacity", [&](auto& f, auto& v) { st.cache_capacity = flags::parse_number<int64_t>(f, v, int64_t{0}); }},
       {"--first-bucket-bytes", [&](auto& f, auto& v) { st.first_bucket_bytes = std::max<int64_t>(1, parse_size(f, v)); }},
       {"--bucket-bytes", [&](auto& f, auto& v) { st.bucket_bytes = std::max<int64_t>(1, parse_size(f, v)); }},
       {"--compression", [&](auto& f, auto& v) { st.compress_fp16 = flags::one_of(f, v, {"none", "fp16"}) == "fp16"; }},
       {"--negotiation", [&](auto& f, auto& v) {
          st.negotiation = flags::one_of(f, v, {"cohort", "tree"}) == "tree" ? Negotiation::tree : Negotiation::cohort;
        }},
       {"--steps", [&](auto& f, auto& v) { so.steps = flags::parse_number<int>(f, v, 2); }},
       {"--json", [&](auto&, auto& v) { json_path = v; }},
       {"--plot", [&](auto&, auto& v) { plot_path = v; }},
       {"--title", [&](auto&, auto& v) { title = v; }}},
      {});
  COHORT_CHECK_AS(ConfigError, !topology_path.empty()) << "predict needs --topology";
  COHORT_CHECK_AS(ConfigError, !workload_path.empty()) << "predict needs --workload";
  const Topology base = read_topology_file(topology_path);
  const Workload w = read_workload_file(workload_path);

  std::vector<Topology> cases;
  if (ranks_list.empty()) {
    cases.push_back(base);
  } else {
    for (const std::string& item : split(ranks_list, ',')) {
      const int r = flags::parse_number<int>("--ranks", item, 1);
      Topology t = base;
      if (r <= base.ranks_per_host) {
        t.ranks_per_host = r;
        t = with_hosts(t, 1);
      } else {
        COHORT_CHECK_AS(ConfigError, r % base.ranks_per_host == 0)
            << "--ranks " << r << " is not a whole number of hosts of " << base.ranks_per_host << " ranks";
        t = with_hosts(t, r / base.ranks_per_host);
      }
      cases.push_back(t);
    }
  }

  std::printf("# cohort-sim: workload '%s', %zu tensors, %s per step; compute %.2f ms per step on one rank\n",
              w.name.c_str(), w.tensors.size(), bytes_text(w.total_bytes()).c_str(),
              1e3 * (w.compute_end_s + w.update_s));
  const std::string mode = st.mode == Mode::zero               ? "zero stage " + std::to_string(st.zero_stage)
                           : st.mode == Mode::parameter_server ? "parameter_server, " + std::to_string(st.ps_servers) +
                                                                     " servers"
                                                               : mode_name(st.mode);
  std::printf("# strategy: %s, backend %s, fusion %s, cycle time %.0f us, linger %.0f us%s%s\n", mode.c_str(),
              st.backend.c_str(),
              bytes_text(double(st.fusion_threshold_bytes)).c_str(), st.cycle_time_s * 1e6, st.linger_s * 1e6,
              st.compress_fp16 ? ", fp16 compression" : "", st.negotiation == Negotiation::tree ? ", tree negotiation" : "");
  std::printf("%6s %6s %-12s %10s %10s %10s %10s %10s %8s %8s %9s %7s\n", "ranks", "hosts", "algorithm", "step_ms",
              "compute_ms", "exposed_ms", "efficiency", "comm_ms", "nic_util", "shm_util", "cycles", "colls");
  std::vector<Prediction> preds;
  for (const Topology& t : cases) {
    Prediction p = simulate(t, w, st, so);
    std::printf("%6d %6d %-12s %10.3f %10.3f %10.3f %9.1f%% %10.3f %7.1f%% %7.1f%% %9.0f %7.1f\n", p.ranks, p.hosts,
                p.algorithm.c_str(), 1e3 * p.step_s, 1e3 * p.compute_s, 1e3 * p.exposed_s, 100 * p.efficiency,
                1e3 * p.comm_s, 100 * p.nic_utilisation, 100 * p.shm_utilisation, p.cycles, p.collectives);
    preds.push_back(std::move(p));
  }
  if (w.measured_step_s > 0)
    std::printf("# the workload's own run measured %.3f ms per step\n", 1e3 * w.measured_step_s);
  if (!json_path.empty()) {
    std::ostringstream os;
    os << "{\"workload\": \"" << json::escape(w.name) << "\", \"predictions\": [\n";
    for (size_t i = 0; i < preds.size(); ++i) os << "  " << prediction_json(preds[i]) << (i + 1 < preds.size() ? ",\n" : "\n");
    os << "]}\n";
    write_file(json_path, os.str());
  }
  if (!plot_path.empty()) {
    plot::Figure f;
    f.title = title.empty() ? "cohort-sim: " + w.name : title;
    f.x = {.label = "ranks", .log = true};
    f.y = {.label = "scaling efficiency (%)", .min = 0, .max = 105};
    plot::Series s{.label = w.name};
    for (const Prediction& p : preds) {
      s.x.push_back(p.ranks);
      s.y.push_back(100 * p.efficiency);
      f.x.ticks.push_back(p.ranks);
    }
    f.series.push_back(std::move(s));
    plot::write_png(f, plot_path);
  }
  return 0;
}

// ---- workload -----------------------------------------------------------------

int workload(const std::vector<std::string>& args) {
  std::string timeline, out, first;
  flags::parse_flags(args,
                        {{"--timeline", [&](auto&, auto& v) { timeline = v; }},
                         {"--out", [&](auto&, auto& v) { out = v; }},
                         {"--first", [&](auto&, auto& v) { first = v; }}},
                        {});
  COHORT_CHECK_AS(ConfigError, !timeline.empty()) << "workload needs --timeline";
  Workload w = workload_from_timeline_file(timeline, first);
  w.name = timeline.substr(timeline.find_last_of('/') + 1);
  const std::string text = workload_json(w);
  if (out.empty())
    std::fputs(text.c_str(), stdout);
  else
    write_file(out, text);
  std::fprintf(stderr,
               "cohort-sim: %zu %s, %s per step, step period %.3f ms, last gradient at %.3f ms, "
               "engine wake-up %.1f us\n",
               w.tensors.size(), w.ordered ? "buckets (ordered)" : "tensors", bytes_text(w.total_bytes()).c_str(),
               1e3 * w.measured_step_s, 1e3 * w.compute_end_s, 1e6 * w.measured_wake_s);
  return 0;
}

// ---- fit ------------------------------------------------------------------------

int fit(const std::vector<std::string>& args) {
  std::string csv, topology, algorithm, link, collective = "allreduce";
  bool cpu = false;
  flags::parse_flags(args,
                        {{"--csv", [&](auto&, auto& v) { csv = v; }},
                         {"--topology", [&](auto&, auto& v) { topology = v; }},
                         {"--algorithm", [&](auto& f, auto& v) { algorithm = flags::one_of(f, v, {"shm", "ring", "hierarchical"}); }},
                         {"--link", [&](auto& f, auto& v) { link = flags::one_of(f, v, {"shm", "intra", "network"}); }},
                         {"--collective", [&](auto& f, auto& v) {
                            collective = flags::one_of(f, v, {"allreduce", "reduce_scatter", "allgather"});
                          }}},
                        {{"--cpu", [&] { cpu = true; }}});
  COHORT_CHECK_AS(ConfigError, !csv.empty() && !topology.empty() && !algorithm.empty() && !link.empty())
      << "fit needs --csv, --topology, --algorithm and --link";
  const Topology t = read_topology_file(topology);
  int ranks = 0;
  const std::vector<Sample> samples = read_bench_csv(csv, collective, ranks);
  COHORT_CHECK_AS(ConfigError, ranks == t.ranks())
      << csv << " was measured with " << ranks << " ranks, the topology has " << t.ranks();
  LinkFit f;
  if (cpu) {
    // --csv's time column is CPU per rank and op; the network's CPU costs.
    COHORT_CHECK_AS(ConfigError, link == "network" && collective == "allreduce")
        << "fit --cpu fits the network link's CPU costs from allreduces (--link network --collective allreduce)";
    f = fit_network_cpu(t, resolve_algorithm(algorithm, t), samples);
    std::printf("{\"network\": {\"cpu_step_s\": %.6g, \"cpu_s_per_byte\": %.6g}}\n", f.link.cpu_step_s,
                f.link.cpu_s_per_byte);
  } else {
    f = fit_link(t, resolve_algorithm(algorithm, t), parse_link_class(link), samples, parse_collective(collective));
    std::printf("{\"%s\": {\"alpha_s\": %.6g, \"bytes_per_s\": %.6g}}\n", link.c_str(), f.link.alpha_s,
                f.link.bytes_per_s);
  }
  std::fprintf(stderr, "cohort-sim: %zu sizes, relative error rms %.1f%%, max %.1f%%\n", f.points,
               100 * f.rms_relative_error, 100 * f.max_relative_error);
  return 0;
}

// ---- plot ---------------------------------------------------------------------

int plot_command(const std::vector<std::string>& args) {
  std::string out, metric = "efficiency";
  plot::Figure f;
  bool log_x = false;
  std::vector<std::pair<std::string, std::string>> series, points;
  auto pair_of = [](const std::string& flag, const std::string& v) {
    const size_t eq = v.find('=');
    COHORT_CHECK_AS(ConfigError, eq != std::string::npos && eq > 0) << flag << " expects LABEL=VALUE, got '" << v << "'";
    return std::make_pair(v.substr(0, eq), v.substr(eq + 1));
  };
  flags::parse_flags(args,
                        {{"--out", [&](auto&, auto& v) { out = v; }},
                         {"--title", [&](auto&, auto& v) { f.title = v; }},
                         {"--x-label", [&](auto&, auto& v) { f.x.label = v; }},
                         {"--y-label", [&](auto&, auto& v) { f.y.label = v; }},
                         {"--metric", [&](auto& fl, auto& v) { metric = flags::one_of(fl, v, {"efficiency", "step_ms"}); }},
                         {"--series", [&](auto& fl, auto& v) { series.push_back(pair_of(fl, v)); }},
                         {"--points", [&](auto& fl, auto& v) { points.push_back(pair_of(fl, v)); }}},
                        {{"--log-x", [&] { log_x = true; }}});
  COHORT_CHECK_AS(ConfigError, !out.empty() && !series.empty()) << "plot needs --out and at least one --series";
  f.x.log = log_x;
  if (f.x.label.empty()) f.x.label = "ranks";
  if (f.y.label.empty()) f.y.label = metric == "efficiency" ? "scaling efficiency (%)" : "step time (ms)";
  if (metric == "efficiency") {
    f.y.min = 0;
    f.y.max = 105;
  }
  std::vector<double> xs;
  for (const auto& [label, path] : series) {
    const json::Value doc = json::parse_file(path);
    Fields top(doc, "");
    const json::Value& list = top.required("predictions");
    if (!list.is_array()) field_error(list, "predictions", "expected an array");
    plot::Series s{.label = label};
    for (const json::Value& p : list.items()) {
      s.x.push_back(p.at("ranks").number());
      s.y.push_back(metric == "efficiency" ? 100 * p.at("efficiency").number() : 1e3 * p.at("step_s").number());
      xs.push_back(s.x.back());
    }
    f.series.push_back(std::move(s));
  }
  for (const auto& [label, text] : points) {
    plot::Series s{.label = label, .line = false};
    // Reference points share the color of the series their label starts with.
    for (size_t i = 0; i < series.size(); ++i)
      if (label.rfind(series[i].first, 0) == 0) s.color = plot::palette_color(i);
    for (const std::string& xy : split(text, ',')) {
      const auto parts = split(xy, ':');
      COHORT_CHECK_AS(ConfigError, parts.size() == 2) << "--points expects x:y pairs, got '" << xy << "'";
      s.x.push_back(flags::parse_number<double>("--points", parts[0]));
      s.y.push_back(flags::parse_number<double>("--points", parts[1]));
    }
    f.series.push_back(std::move(s));
  }
  if (log_x) {
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    if (xs.size() <= 12) f.x.ticks = xs;
  }
  plot::write_png(f, out);
  return 0;
}

// ---- autotune ---------------------------------------------------------------------

int autotune(const std::vector<std::string>& args) {
  std::string topology_path, workload_path;
  Strategy st;
  double noise = 0.05;
  int seeds = 20;
  flags::parse_flags(
      args,
      {{"--topology", [&](auto&, auto& v) { topology_path = v; }},
       {"--workload", [&](auto&, auto& v) { workload_path = v; }},
       {"--mode", [&](auto& f, auto& v) { st.mode = flags::one_of(f, v, {"horovod", "ddp"}) == "ddp" ? Mode::ddp : Mode::horovod; }},
       {"--backend", [&](auto& f, auto& v) { st.backend = flags::one_of(f, v, {"auto", "shm", "ring", "hierarchical"}); }},
       {"--noise", [&](auto& f, auto& v) { noise = flags::parse_number<double>(f, v, 0.0); }},
       {"--seeds", [&](auto& f, auto& v) { seeds = flags::parse_number<int>(f, v, 1); }}},
      {});
  COHORT_CHECK_AS(ConfigError, !topology_path.empty() && !workload_path.empty()) << "autotune needs --topology and --workload";
  const Topology t = read_topology_file(topology_path);
  const Workload w = read_workload_file(workload_path);
  const engine::AutotuneOptions grid;
  const engine::AutotuneParams start{st.fusion_threshold_bytes, int64_t(st.cycle_time_s * 1e6)};
  // The simulated surface over the grid (and the start), each point once.
  std::map<std::pair<int64_t, int64_t>, double> surface;
  auto cost = [&](const engine::AutotuneParams& p) {
    auto [it, fresh] = surface.try_emplace({p.fusion_threshold_bytes, p.cycle_time_us}, 0.0);
    if (fresh) {
      Strategy s = st;
      s.fusion_threshold_bytes = p.fusion_threshold_bytes;
      s.cycle_time_s = double(p.cycle_time_us) * 1e-6;
      it->second = simulate(t, w, s).step_s;
    }
    return it->second;
  };
  double best = kInfinity;
  engine::AutotuneParams best_at;
  std::vector<int64_t> thresholds = grid.fusion_thresholds, cycles = grid.cycle_times_us;
  thresholds.push_back(start.fusion_threshold_bytes);
  cycles.push_back(start.cycle_time_us);
  for (int64_t a : thresholds)
    for (int64_t b : cycles)
      if (cost({a, b}) < best) {
        best = cost({a, b});
        best_at = {a, b};
      }
  std::printf("# surface: %zu settings; best %.3f ms/step at fusion %s, cycle %lld us; start %.3f ms/step\n",
              surface.size(), 1e3 * best, bytes_text(double(best_at.fusion_threshold_bytes)).c_str(),
              (long long)best_at.cycle_time_us, 1e3 * cost(start));
  std::printf("%-11s %8s %10s %10s %10s %12s\n", "method", "runs", "steps_mean", "steps_max", "within_5%", "regret_mean");
  for (auto method : {engine::AutotuneMethod::coordinate, engine::AutotuneMethod::bayesian}) {
    double steps = 0, steps_max = 0, regret = 0;
    int within = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      engine::AutotuneOptions o;
      o.method = method;
      o.seed = uint64_t(seed);
      engine::Autotuner tuner(start, o);
      uint64_t state = uint64_t(seed) * 0x9e3779b97f4a7c15ull;
      while (!tuner.converged() && tuner.steps() < 10000) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double u = double(state >> 11) / double(uint64_t(1) << 53);
        tuner.on_step(cost(tuner.current()) * (1 + noise * u));
      }
      const double got = cost(tuner.current());
      steps += tuner.converged_at_step();
      steps_max = std::max(steps_max, double(tuner.converged_at_step()));
      regret += got / best - 1;
      within += got <= 1.05 * best;
    }
    std::printf("%-11s %8d %10.1f %10.0f %9d/%d %11.2f%%\n",
                method == engine::AutotuneMethod::coordinate ? "coordinate" : "bayesian", seeds, steps / seeds,
                steps_max, within, seeds, 100 * regret / seeds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "predict") return predict(args);
    if (command == "workload") return workload(args);
    if (command == "fit") return fit(args);
    if (command == "plot") return plot_command(args);
    if (command == "autotune") return autotune(args);
    std::fprintf(stderr, "cohort-sim: unknown command '%s' (predict, workload, fit, plot, autotune; see --help)\n", command.c_str());
    return 2;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "cohort-sim: %s\n", flags::one_line_message(e).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-sim: %s\n", e.what());
    return 1;
  }
}
