// engine_bench: the engine against the bare communicator, side by side in one
// run (issue 3's performance targets).
//
//   cohortrun -np 2 build/bench/engine_bench [--steps 30] [--reps 3]
//       [--large-mib 64] [--large-iters 5] [--tiny-iters 3000]
//       [--thresholds 0,64K,256K,1M,4M,16M,64M] [--seed 1]
//
// Cases (float32 sum; every time is the largest over ranks of the mean):
//   small   one step = 200 tensors of 4-64 KiB (log-uniform sizes, fixed
//           seed: a ResNet-like mix of small gradients). Bare: 200 in-place
//           allreduces one by one on the communicator. Engine: 200
//           allreduce_async submitted in reverse order (as backward produces
//           them), then every handle waited. Throughput ratio = bare / engine.
//   large   one 64 MiB allreduce, out of place: engine time / bare time.
//   tiny    a 1-element cached allreduce, submit + wait, repeated: the
//           engine's end-to-end latency against the bare call, and the mean
//           negotiation time per cycle from the engine's counters (record
//           exchange + decision; the cache is warm, so no payloads). Then the
//           same op after the group went to sleep: the doorbell's wake-up
//           cost (a store call to ring, every rank's store wait returning).
//   sweep   the small case at each fusion threshold (0 = no fusion), to pick
//           COHORT_FUSION_THRESHOLD.
// Bare and engine runs alternate (--reps times each), so both see the same
// machine state; the table shows the best time of each and, as "ratio", the
// median over reps of the ratio within each back-to-back pair, which is what
// survives a load that changes during the run (the best times may come from
// different moments). The engine runs on its own
// communicator (a split of the world) and the bare calls on the world's, so
// neither waits on the other.
//
// Correctness: every result is checked (small integers, exact in f32); a
// wrong element exits 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/stats.h"
#include "cohort/common/tunables.h"
#include "cohort/engine/engine.h"
#include "cohort/rendezvous/prefix_store.h"

namespace {

using namespace cohort;
using Clock = std::chrono::steady_clock;

struct Flags {
  int steps = 30;
  int reps = 3;
  size_t large_mib = 64;
  int large_iters = 5;
  int tiny_iters = 3000;
  std::vector<int64_t> thresholds = {0, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  unsigned seed = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "engine_bench: %s\nusage: engine_bench [--steps N] [--reps N] [--large-mib N] [--large-iters N]"
               " [--tiny-iters N] [--thresholds a,b,...] [--seed N]\n",
               why);
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    auto integer = [&](const std::string& v) { return tunables::parse_int(a.c_str(), v); };
    if (a == "--steps") f.steps = int(integer(next()));
    else if (a == "--reps") f.reps = int(integer(next()));
    else if (a == "--large-mib") f.large_mib = size_t(integer(next()));
    else if (a == "--large-iters") f.large_iters = int(integer(next()));
    else if (a == "--tiny-iters") f.tiny_iters = int(integer(next()));
    else if (a == "--seed") f.seed = unsigned(integer(next()));
    else if (a == "--thresholds") {
      f.thresholds.clear();
      std::string v = next();  // empty: no sweep
      for (size_t at = 0; !v.empty() && at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        f.thresholds.push_back(integer(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (f.steps < 1 || f.reps < 1 || f.large_iters < 1 || f.tiny_iters < 1) usage("counts must be positive");
  return f;
}

// The 1-minute load average (the machine may be shared), or "?".
std::string load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "?";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "?";
  std::string s(buf);
  return s.substr(0, s.find(' '));
}

// The largest over ranks of `v` (on the bare communicator).
double max_over_ranks(comm::Communicator& c, double v) {
  c.allreduce(BufferView{&v, 1, DType::f64}, {.op = ReduceOp::max});
  return v;
}

int g_wrong = 0;

using cohort::median;

void check(const std::vector<float>& buf, float want, const char* what) {
  for (float v : buf)
    if (v != want) {
      if (g_wrong++ < 5) std::fprintf(stderr, "engine_bench: wrong result in %s: %g, want %g\n", what, v, want);
      return;
    }
}

// 200 tensors of 4-64 KiB, log-uniform, multiples of 4 bytes.
std::vector<size_t> small_sizes(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(std::log(4096.0), std::log(65536.0));
  std::vector<size_t> counts;
  for (int i = 0; i < 200; ++i) counts.push_back(size_t(std::exp(u(rng))) / 4);
  return counts;
}

struct Small {
  std::vector<size_t> counts;
  std::vector<std::vector<float>> bufs;
  std::vector<std::string> names;
  size_t bytes = 0;

  explicit Small(unsigned seed) : counts(small_sizes(seed)) {
    for (size_t i = 0; i < counts.size(); ++i) {
      bufs.emplace_back(counts[i]);
      names.push_back("grad/" + std::to_string(i));
      bytes += counts[i] * 4;
    }
  }
  void fill(int rank) {
    for (auto& b : bufs) std::fill(b.begin(), b.end(), float(rank + 1));
  }
  void check_all(int n, int steps) {
    // Each step sums in place: after s steps of sums of (r + 1) values the
    // buffer holds (n(n+1)/2) * n^(s-1).
    float want = float(n * (n + 1) / 2) * std::pow(float(n), float(steps - 1));
    for (auto& b : bufs) check(b, want, "small ops");
  }
};

// Seconds per step of the bare communicator: `steps` steps after one warm-up.
double small_bare(comm::Communicator& c, Small& s, int steps) {
  auto step = [&] {
    for (size_t i = s.bufs.size(); i-- > 0;)
      c.allreduce(BufferView{s.bufs[i].data(), s.counts[i], DType::f32});
  };
  s.fill(c.rank());
  step();
  s.check_all(c.size(), 1);
  c.barrier();
  const auto t0 = Clock::now();
  for (int k = 0; k < steps; ++k) {
    s.fill(c.rank());  // keep values exact (sums would overflow f32 precision)
    step();
  }
  const double t = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  s.check_all(c.size(), 1);
  return max_over_ranks(c, t);
}

double small_engine(comm::Communicator& bare, engine::Engine& e, Small& s, int steps) {
  std::vector<engine::Handle> hs(s.bufs.size());
  auto step = [&] {
    for (size_t i = s.bufs.size(); i-- > 0;)
      hs[i] = e.allreduce_async(s.names[i], BufferView{s.bufs[i].data(), s.counts[i], DType::f32});
    for (auto& h : hs) h.wait();
  };
  s.fill(bare.rank());
  step();
  s.check_all(bare.size(), 1);
  bare.barrier();
  const auto t0 = Clock::now();
  for (int k = 0; k < steps; ++k) {
    s.fill(bare.rank());
    step();
  }
  const double t = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  s.check_all(bare.size(), 1);
  return max_over_ranks(bare, t);
}

double large_bare(comm::Communicator& c, std::vector<float>& in, std::vector<float>& out, int iters) {
  BufferView i{in.data(), in.size(), DType::f32}, o{out.data(), out.size(), DType::f32};
  c.allreduce(i, o);
  check(out, float(c.size()), "64 MiB bare");
  c.barrier();
  const auto t0 = Clock::now();
  for (int k = 0; k < iters; ++k) c.allreduce(i, o);
  return max_over_ranks(c, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
}

double large_engine(comm::Communicator& bare, engine::Engine& e, std::vector<float>& in, std::vector<float>& out,
                    int iters) {
  BufferView i{in.data(), in.size(), DType::f32}, o{out.data(), out.size(), DType::f32};
  e.allreduce_async("large", i, o).wait();
  check(out, float(bare.size()), "64 MiB engine");
  bare.barrier();
  const auto t0 = Clock::now();
  for (int k = 0; k < iters; ++k) e.allreduce_async("large", i, o).wait();
  return max_over_ranks(bare, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
}

engine::EngineOptions options_with(int64_t threshold) {
  engine::EngineOptions o;
  o.fusion_threshold_bytes = threshold;
  o.timeline_path = "";
  o.label = "bench";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  try {
    comm::World world = comm::init_world();
    comm::Communicator& bare = *world.comm;
    const int rank = bare.rank(), n = bare.size();
    std::shared_ptr<comm::Communicator> ecomm(bare.split(0, rank));
    auto estore = std::make_shared<rendezvous::PrefixStore>("engine_bench", world.store);
    const int64_t default_threshold = tunables::fusion_threshold();
    auto say = [&](const char* fmt, auto... args) {
      if (rank == 0) {
        std::printf(fmt, args...);
        std::fflush(stdout);
      }
    };

    Small small(flags.seed);
    say("engine_bench: %d ranks, backend %s, default COHORT_FUSION_THRESHOLD %lld, linger %lld us, load %s\n", n,
        bare.backend().c_str(), (long long)default_threshold, (long long)tunables::cycle_linger_us(),
        load_average().c_str());
    say("small step: %zu tensors, %.2f MiB in all (min %zu B, max %zu B)\n", small.counts.size(),
        small.bytes / 1048576.0, *std::min_element(small.counts.begin(), small.counts.end()) * 4,
        *std::max_element(small.counts.begin(), small.counts.end()) * 4);

    // --- small ops and negotiation, with the default threshold.
    double best_bare = 1e30, best_engine = 1e30, negotiation_us = 0, cycles_per_step = 0;
    double tiny_bare = 1e30, tiny_engine = 1e30, tiny_negotiation_us = 0;
    double large_b = 1e30, large_e = 1e30;
    std::vector<double> small_ratios, large_ratios, tiny_ratios;
    double wake_us = 0, wake_sleeps = 0;
    engine::EngineStats small_stats{};
    {
      engine::Engine e(ecomm, estore, options_with(default_threshold));
      for (int rep = 0; rep < flags.reps; ++rep) {
        const double b = small_bare(bare, small, flags.steps);
        const auto s0 = e.stats();
        const double en = small_engine(bare, e, small, flags.steps);
        best_bare = std::min(best_bare, b);
        best_engine = std::min(best_engine, en);
        small_ratios.push_back(b / en);
        const auto s1 = e.stats();
        small_stats = s1;
        cycles_per_step = double(s1.cycles - s0.cycles) / (flags.steps + 1);
        negotiation_us = double(s1.negotiation_ns - s0.negotiation_ns) / 1e3 / double(s1.cycles - s0.cycles);
      }

      // Tiny cached op: latency and negotiation per cycle with a warm cache.
      std::vector<float> one(1);
      for (int rep = 0; rep < flags.reps; ++rep) {
        bare.barrier();
        auto t0 = Clock::now();
        for (int k = 0; k < flags.tiny_iters; ++k) bare.allreduce(BufferView{one.data(), 1, DType::f32});
        const double tb =
            max_over_ranks(bare, std::chrono::duration<double>(Clock::now() - t0).count() / flags.tiny_iters);
        tiny_bare = std::min(tiny_bare, tb);
        e.allreduce_async("tiny", BufferView{one.data(), 1, DType::f32}).wait();  // cached from now on
        bare.barrier();
        const auto s0 = e.stats();
        t0 = Clock::now();
        for (int k = 0; k < flags.tiny_iters; ++k) e.allreduce_async("tiny", BufferView{one.data(), 1, DType::f32}).wait();
        const double t = max_over_ranks(bare, std::chrono::duration<double>(Clock::now() - t0).count() / flags.tiny_iters);
        const auto s1 = e.stats();
        tiny_ratios.push_back(t / tb);
        if (t < tiny_engine) {
          tiny_engine = t;
          tiny_negotiation_us = double(s1.negotiation_ns - s0.negotiation_ns) / 1e3 / double(s1.cycles - s0.cycles);
        }
        if (s1.cache_misses != s0.cache_misses) std::fprintf(stderr, "engine_bench: tiny op missed the cache\n");
      }

      // Waking a sleeping group: the same tiny op after the engines slept.
      {
        const auto linger = std::chrono::microseconds(tunables::cycle_linger_us());
        const int iters = std::max(5, std::min(50, flags.tiny_iters / 20));
        double total = 0;
        const auto s0 = e.stats();
        for (int k = 0; k < iters; ++k) {
          bare.barrier();
          std::this_thread::sleep_for(linger * 3 + std::chrono::milliseconds(5));
          const auto t0 = Clock::now();
          e.allreduce_async("tiny", BufferView{one.data(), 1, DType::f32}).wait();
          total += std::chrono::duration<double>(Clock::now() - t0).count();
        }
        wake_us = max_over_ranks(bare, total / iters) * 1e6;
        wake_sleeps = double(e.stats().sleeps - s0.sleeps) / iters;
      }

      // Large.
      std::vector<float> in(flags.large_mib << 18, 1.0f), out(in.size());
      for (int rep = 0; rep < flags.reps; ++rep) {
        const double b = large_bare(bare, in, out, flags.large_iters);
        const double en = large_engine(bare, e, in, out, flags.large_iters);
        large_b = std::min(large_b, b);
        large_e = std::min(large_e, en);
        large_ratios.push_back(en / b);
      }
    }

    say("\n%-34s %14s %14s %9s   %s\n", "case", "bare", "engine", "ratio", "target");
    say("%-34s %11.1f us %11.1f us %8.2fx   >= 5x throughput (bare/engine)\n", "200 x 4-64 KiB, per step",
        best_bare * 1e6, best_engine * 1e6, median(small_ratios));
    say("%-34s %11.2f ms %11.2f ms %9.3f   <= 1.1 (engine/bare)\n",
        (std::to_string(flags.large_mib) + " MiB allreduce").c_str(), large_b * 1e3, large_e * 1e3,
        median(large_ratios));
    say("%-34s %11.2f us %11.2f us %8.2fx   (engine/bare latency)\n", "1-float cached allreduce", tiny_bare * 1e6,
        tiny_engine * 1e6, median(tiny_ratios));
    say("%-34s %14s %11.2f us\n", "negotiation per cycle, cache warm", "-", tiny_negotiation_us);
    say("%-34s %14s %11.2f us   (doorbell; %.2f sleeps per op)\n", "1-float after the group slept", "-", wake_us,
        wake_sleeps);
    say("%-34s %14s %11.2f us   (%.1f cycles/step, %llu fused ops in %llu groups)\n",
        "record exchange/cycle, small step", "-", negotiation_us, cycles_per_step,
        (unsigned long long)small_stats.fused_ops, (unsigned long long)small_stats.fusion_groups);

    // --- threshold sweep.
    if (!flags.thresholds.empty()) {
      say("\nfusion threshold sweep (small step; bare measured alongside each):\n");
      say("%-12s %14s %14s %9s %12s\n", "threshold", "bare", "engine", "ratio", "groups/step");
      for (int64_t th : flags.thresholds) {
        engine::Engine e(ecomm, estore, options_with(th));
        double b = 1e30, en = 1e30, groups = 0;
        std::vector<double> ratios;
        for (int rep = 0; rep < flags.reps; ++rep) {
          const double tb = small_bare(bare, small, flags.steps);
          const auto s0 = e.stats();
          const double te = small_engine(bare, e, small, flags.steps);
          groups = double(e.stats().fusion_groups - s0.fusion_groups) / (flags.steps + 1);
          b = std::min(b, tb);
          en = std::min(en, te);
          ratios.push_back(tb / te);
        }
        say("%-12lld %11.1f us %11.1f us %8.2fx %12.1f\n", (long long)th, b * 1e6, en * 1e6, median(ratios), groups);
      }
    }
    say("load average at the end: %s\n", load_average().c_str());
    bare.barrier();
    return g_wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    return 1;
  }
}
