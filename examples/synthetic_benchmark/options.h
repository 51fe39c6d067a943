// Command-line flags of synthetic_benchmark. "--flag value" or "--flag=value";
// a bad flag or value throws ConfigError naming it (main prints one line and
// exits 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::examples::synthetic {

struct BenchmarkOptions {
  std::string model = "mlp";   // mlp | cnn | resnet
  int64_t width = 4096;        // mlp: hidden width
  int depth = 2;               // mlp: hidden layers (model size: ~(depth - 1) width^2 parameters)
  std::string strategy;        // make_strategy() spec; empty: the one --mode names
  std::string mode = "ddp";    // horovod | ddp | dp | single: shorthands for strategies (strategy_spec())
  int batch_size = 64;         // per rank
  int steps = 20;              // measured steps
  int warmup = 5;              // steps before measuring
  int threads = 0;             // intra-op threads per rank; 0: LibTorch's default (cohortrun sets OMP_NUM_THREADS)
  double lr = 0.01;
  int replicas = 2;            // dp: CPU replicas in the one process (batch-size is then the whole batch)
  bool bucket_view = true;     // ddp: gradient_as_bucket_view (no copy into and out of the buckets)
  bool quiet = false;          // no per-step lines
  bool help = false;
};

BenchmarkOptions parse_options(const std::vector<std::string>& args);
std::string usage();

// The strategy a run uses: --strategy, or the one --mode stands for
// (single: "one_device", every rank training alone; horovod and ddp:
// multi_worker's styles; dp: mirrored with --replicas).
std::string strategy_spec(const BenchmarkOptions& o);

}  // namespace cohort::examples::synthetic
