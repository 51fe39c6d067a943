// The knobs of a parameter-server job: how variables are split, how servers
// update them, and how far workers may run apart.
//
// One JobOptions describes the whole job and is the same on every rank; it is
// what `parameter_server:servers=S,staleness=K,...` parses into
// (parse_job_options). Every field has a default; the spec keys are listed
// next to the fields.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cohort/common/dtype.h"

namespace cohort::ps {

// What a server does with the gradients it receives.
enum class UpdateRule : uint8_t {
  sgd,      // p -= lr * (g [+ momentum buffer]), torch.optim.SGD's rule
  adam,     // torch.optim.Adam's rule; rows of a sparse table update lazily (SparseAdam)
  adagrad,  // torch.optim.Adagrad's rule; sparse rows update only their accumulators
  sum,      // summation service (BytePS): the server keeps the step's gradient
            // sum, workers pull it and step their own optimizer
};
const char* update_rule_name(UpdateRule rule);
UpdateRule parse_update_rule(const std::string& name);  // ConfigError naming the choices

// Server-side optimizer hyper-parameters (the subset of torch.optim's that
// the rules above use; defaults are torch's).
struct OptimizerOptions {
  UpdateRule rule = UpdateRule::sgd;
  double lr = 0.01;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd, adam, adagrad: g += weight_decay * p (L2, as torch)
  double beta1 = 0.9;         // adam
  double beta2 = 0.999;       // adam
  double eps = 1e-8;          // adam; adagrad uses adagrad_eps
  double adagrad_eps = 1e-10;
  double initial_accumulator = 0.0;  // adagrad
};

// How a variable is split along dimension 0 (TensorFlow's partitioners).
struct PartitionOptions {
  // Fixed number of shards (FixedShardsPartitioner); 0: by size below.
  int num_shards = 0;
  // MinSizePartitioner: as many shards as possible of at least this many
  // bytes, at most max_shards (0: the number of servers).
  int64_t min_shard_bytes = 256 << 10;
  int max_shards = 0;
};

// staleness: how far apart workers may run.
//   0        synchronous: an update applies the mean of every live worker's
//            gradient of that step (minus backup workers), so results equal
//            synchronous data parallelism
//   K > 0    bounded staleness: each worker's gradient applies when it
//            commits its step; a worker at step c reads only once the slowest
//            live worker has committed c - K steps
//   async    (kAsync) no waiting at all
inline constexpr int64_t kAsync = -1;

struct JobOptions {
  int servers = 1;                  // servers=S: the last S ranks serve
  int64_t staleness = 0;            // staleness=K | async
  int backup_workers = 0;           // backup_workers=B (staleness=0 only)
  OptimizerOptions optimizer;       // optimizer=sgd|adam|adagrad|sum, lr=, momentum=, ...
  PartitionOptions partition;       // shards=N | min_shard_bytes=B, max_shards=M
  int replicas = 0;                 // replicas=0|1: a copy of each partition on the next server
  int64_t replicate_every = 1;      // replicate_every=R: updates between replica snapshots
  std::string checkpoint_dir;       // checkpoint_dir=PATH: where restores come from
  bool hybrid = false;              // hybrid=1: dense variables allreduced among workers
  int64_t sparse_min_rows = 0;      // (torch) embedding tables at least this tall are row-sparse
};

// Parses the `key=value` pairs of a `parameter_server:...` spec into
// `options` (defaults for absent keys) given the world size, and validates
// the whole: servers in [1, size), backup_workers < workers, known keys
// only. Throws ConfigError with one line naming the key, its value and what
// is allowed.
JobOptions parse_job_options(const std::map<std::string, std::string>& keys, int world_size);

// The keys parse_job_options accepts, for help texts.
const char* job_option_keys();

// "servers=1,staleness=0,optimizer=sgd,lr=0.01,..." for logs.
std::string describe(const JobOptions& options);

}  // namespace cohort::ps
