// Command-line flags of the fashion_mnist example.
//
// Flags take "--flag value" or "--flag=value"; a bad flag or value throws
// ConfigError naming it, and main() prints usage().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::examples {

struct TrainOptions {
  std::string strategy = "auto";  // make_strategy() spec
  int epochs = 2;
  int batch_size = 128;           // global: over all replicas
  double lr = 0.04;               // for the global batch
  double warmup_epochs = 0.5;     // linear warm-up to lr
  std::string optimizer = "sgd";  // "sgd" (momentum) or "adam"
  double momentum = 0.9;
  std::string model = "cnn";      // "mlp" or "cnn"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string data_format = "idx";  // "idx" (data_dir) or "tfrecord" (data: shards of cohort-data convert)
  std::string data;                 // the TFRecord directory (train*/test* shards)
  bool augment = false;             // tfrecord: random crop and flip in the pipeline
  int workers = 0;                  // tfrecord: pipeline threads per process; 0: autotuned
  std::string transform;            // tfrecord: save the transform artifact here (the chief)
  std::string predictions;          // the test set's predicted classes, one per line (the chief)
  std::string checkpoint;         // ModelCheckpoint file; empty: none
  int64_t checkpoint_every = 0;   // also every N steps (0: at epoch ends only)
  std::string backup;             // BackupAndRestore directory; empty: none
  int64_t backup_every = 0;       // back up every N steps too (0: at epoch ends and preemption)
  std::string metrics;            // JSON lines; empty: none
  std::string csv;                // the history as CSV; empty: none
  std::string plot;               // the history as PNG charts PREFIX-{loss,accuracy}.png; empty: none
  std::string tensorboard;  // TensorBoard event files under DIR/train, DIR/validation (batch scalars every log_every)
  int threads = 0;                // intra-op threads per process; 0: LibTorch's default (OMP_NUM_THREADS)
  uint64_t seed = 42;
  int64_t limit_train = 0;        // use only the first N examples (0: all)
  int64_t limit_test = 0;
  int64_t log_every = 100;        // steps between metric lines
  std::string progress = "auto";  // "auto" (bar on a terminal), "bar", "lines", "none"
  double target_accuracy = 0;     // percent; exit 3 when the final test accuracy is below (0: no target)
  // Differential privacy (DP-SGD / DP-Adam): on when dp_epsilon or
  // dp_noise_multiplier is set. Poisson sampling at q = batch_size / N.
  double dp_epsilon = 0;          // target epsilon over all epochs (the noise is searched for)
  double dp_noise_multiplier = 0; // or sigma given directly
  double dp_delta = 1e-5;
  double dp_max_grad_norm = 1.0;
  std::string dp_accountant = "rdp";
  std::string dp_clipping = "flat";
  bool dp_secure_noise = false;
  bool dp() const { return dp_epsilon > 0 || dp_noise_multiplier > 0; }
  // --strategy, with the --dp-* flags as the privacy wrapper's spec
  // ("multi_worker+privacy:epsilon=3,...", core/strategy_registry.h).
  std::string strategy_spec() const;
  bool help = false;
};

TrainOptions parse_options(const std::vector<std::string>& args);
std::string usage();

}  // namespace cohort::examples
