// Command-line flags of synthetic_benchmark. "--flag value" or "--flag=value";
// a bad flag or value throws ConfigError naming it (main prints one line and
// exits 2).
#pragma once

#include <string>
#include <vector>

namespace cohort::examples::synthetic {

struct BenchmarkOptions {
  std::string model = "mlp";   // mlp | cnn | resnet
  std::string mode = "ddp";    // horovod | ddp | dp | single (see main.cc's trainer table)
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

// `modes`: the accepted --mode values (main's trainer table).
BenchmarkOptions parse_options(const std::vector<std::string>& args, const std::vector<std::string>& modes);
std::string usage(const std::vector<std::string>& modes);

}  // namespace cohort::examples::synthetic
