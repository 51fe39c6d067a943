#include "examples/fashion_mnist/options.h"

#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/flags.h"

namespace cohort::examples {

using namespace cohort::flags;
std::string usage() {
  return R"(usage: fashion_mnist [flags]
Trains a classifier on Fashion-MNIST with cohort's DistributedOptimizer; run it
under cohortrun for several ranks:  cohortrun -np 2 fashion_mnist --epochs 2

  --epochs N            epochs to train (2)
  --batch-size N        examples per rank per step (64)
  --lr X                learning rate of one rank at --batch-size (0.02)
  --lr-scaling size|none  multiply the lr by the number of ranks (size)
  --warmup-epochs X     linear warm-up from lr to the scaled lr (0.5)
  --optimizer sgd|adam  SGD with momentum, or Adam (sgd)
  --momentum X          SGD momentum (0.9)
  --model mlp|cnn       network (cnn)
  --data-dir DIR        where the IDX files are (/usr/share/datasets/fashion-mnist)
  --checkpoint FILE     save a checkpoint there after every epoch (rank 0)
  --checkpoint-every N  also every N steps
  --resume              continue from --checkpoint (or its .prev) when present
  --metrics FILE        append JSON lines: steps, epochs, the final result
  --threads N           intra-op threads per rank (0: OMP_NUM_THREADS, as cohortrun sets it)
  --compression none|fp16|bf16  gradient compression on the wire (none)
  --seed N              model initialisation and shuffling (42)
  --limit-train N       train on the first N examples only (all)
  --limit-test N        test on the first N examples only (all)
  --log-every N         steps between metric lines (100)
  --progress auto|bar|lines|none  progress display on rank 0 (auto: a bar on a terminal)
  --target-accuracy P   exit with status 3 when the final test accuracy is below P percent
  --help                this text
)";
}

TrainOptions parse_options(const std::vector<std::string>& args) {
  TrainOptions o;
  const std::map<std::string, FlagSetter> with_value = {
      {"--epochs", [&](auto& f, auto& v) { o.epochs = parse_number<int>(f, v); }},
      {"--batch-size", [&](auto& f, auto& v) { o.batch_size = parse_number<int>(f, v); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_number<double>(f, v); }},
      {"--lr-scaling", [&](auto& f, auto& v) { o.lr_scaling = one_of(f, v, {"size", "none"}); }},
      {"--warmup-epochs", [&](auto& f, auto& v) { o.warmup_epochs = parse_number<double>(f, v); }},
      {"--optimizer", [&](auto& f, auto& v) { o.optimizer = one_of(f, v, {"sgd", "adam"}); }},
      {"--momentum", [&](auto& f, auto& v) { o.momentum = parse_number<double>(f, v); }},
      {"--model", [&](auto& f, auto& v) { o.model = one_of(f, v, {"mlp", "cnn"}); }},
      {"--data-dir", [&](auto&, auto& v) { o.data_dir = v; }},
      {"--checkpoint", [&](auto&, auto& v) { o.checkpoint = v; }},
      {"--checkpoint-every", [&](auto& f, auto& v) { o.checkpoint_every = parse_number<int64_t>(f, v); }},
      {"--metrics", [&](auto&, auto& v) { o.metrics = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v); }},
      {"--compression", [&](auto& f, auto& v) { o.compression = one_of(f, v, {"none", "fp16", "bf16"}); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--limit-train", [&](auto& f, auto& v) { o.limit_train = parse_number<int64_t>(f, v); }},
      {"--limit-test", [&](auto& f, auto& v) { o.limit_test = parse_number<int64_t>(f, v); }},
      {"--log-every", [&](auto& f, auto& v) { o.log_every = parse_number<int64_t>(f, v); }},
      {"--progress", [&](auto& f, auto& v) { o.progress = one_of(f, v, {"auto", "bar", "lines", "none"}); }},
      {"--target-accuracy", [&](auto& f, auto& v) { o.target_accuracy = parse_number<double>(f, v); }},
  };
  parse_flags(args, with_value,
              {{"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}, {"--resume", [&] { o.resume = true; }}});
  COHORT_CHECK_AS(ConfigError, o.epochs >= 1) << "--epochs must be at least 1, got " << o.epochs;
  COHORT_CHECK_AS(ConfigError, o.batch_size >= 1) << "--batch-size must be at least 1, got " << o.batch_size;
  COHORT_CHECK_AS(ConfigError, o.lr > 0) << "--lr must be positive, got " << o.lr;
  COHORT_CHECK_AS(ConfigError, o.warmup_epochs >= 0) << "--warmup-epochs must not be negative";
  COHORT_CHECK_AS(ConfigError, o.threads >= 0) << "--threads must not be negative";
  COHORT_CHECK_AS(ConfigError, o.log_every >= 1) << "--log-every must be at least 1";
  COHORT_CHECK_AS(ConfigError, o.checkpoint_every >= 0) << "--checkpoint-every must not be negative";
  COHORT_CHECK_AS(ConfigError, o.limit_train >= 0 && o.limit_test >= 0) << "--limit-* must not be negative";
  COHORT_CHECK_AS(ConfigError, !o.resume || !o.checkpoint.empty()) << "--resume needs --checkpoint FILE";
  COHORT_CHECK_AS(ConfigError, o.target_accuracy >= 0 && o.target_accuracy <= 100)
      << "--target-accuracy is a percentage, got " << o.target_accuracy;
  return o;
}

}  // namespace cohort::examples
