#include "examples/fashion_mnist/options.h"

#include "cohort/common/check.h"
#include "cohort/common/flags.h"
#include "cohort/torch/strategy/make_strategy.h"

namespace cohort::examples {

using namespace cohort::flags;

std::string usage() {
  return R"(usage: fashion_mnist [flags]
Trains a classifier on Fashion-MNIST with fit(); the strategy decides how it
is distributed, with no change to the program:
  fashion_mnist --strategy one_device
  fashion_mnist --strategy mirrored:replicas=2
  cohortrun -np 2 fashion_mnist --strategy multi_worker
  cohortrun -np 3 fashion_mnist --strategy parameter_server:servers=1

  --strategy SPEC       how to distribute (auto: multi_worker when launched on
                        several ranks, else one_device); see below
  --epochs N            epochs to train (2)
  --batch-size N        global batch: examples per step over all replicas (128)
  --lr X                learning rate for the global batch (0.04)
  --warmup-epochs X     linear warm-up to the rate over the first X epochs (0.5)
  --optimizer sgd|adam  SGD with momentum, or Adam (sgd)
  --momentum X          SGD momentum (0.9)
  --model mlp|cnn       network (cnn)
  --data-dir DIR        where the IDX files are (/usr/share/datasets/fashion-mnist)
  --checkpoint FILE     save the model after every epoch (the chief, atomically)
  --checkpoint-every N  also every N steps
  --backup DIR          back up the whole run to DIR at every epoch end and on
                        SIGTERM/SIGINT, and resume from it when it is there
  --backup-every N      also every N steps
  --metrics FILE        JSON lines: start, a step line every --log-every steps, epochs, end
  --csv FILE            the per-epoch history as CSV
  --threads N           intra-op threads per process (0: OMP_NUM_THREADS, as cohortrun sets it)
  --seed N              model initialisation and data order (42)
  --limit-train N       train on the first N examples only (all)
  --limit-test N        test on the first N examples only (all)
  --log-every N         steps between metric lines (100)
  --progress auto|bar|lines|none  progress display (auto: a bar on a terminal)
  --target-accuracy P   exit with status 3 when the final test accuracy is below P percent
  --help                this text

Exit status: 0 done, 2 bad flags, 3 below --target-accuracy, 75 preempted
(backed up to --backup; run the same command again to resume).

Strategies (--strategy NAME[:key=value,...]):
)" + strategy_help();
}

TrainOptions parse_options(const std::vector<std::string>& args) {
  TrainOptions o;
  auto retired = [](const std::string& flag, const std::string& instead) {
    return [flag, instead](auto&, auto&) { COHORT_THROW(ConfigError) << flag << " is gone: " << instead; };
  };
  const std::map<std::string, FlagSetter> with_value = {
      {"--strategy", [&](auto&, auto& v) { o.strategy = v; }},
      {"--epochs", [&](auto& f, auto& v) { o.epochs = parse_number<int>(f, v, 1); }},
      {"--batch-size", [&](auto& f, auto& v) { o.batch_size = parse_number<int>(f, v, 1); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_number<double>(f, v); }},
      {"--warmup-epochs", [&](auto& f, auto& v) { o.warmup_epochs = parse_number<double>(f, v); }},
      {"--optimizer", [&](auto& f, auto& v) { o.optimizer = one_of(f, v, {"sgd", "adam"}); }},
      {"--momentum", [&](auto& f, auto& v) { o.momentum = parse_number<double>(f, v); }},
      {"--model", [&](auto& f, auto& v) { o.model = one_of(f, v, {"mlp", "cnn"}); }},
      {"--data-dir", [&](auto&, auto& v) { o.data_dir = v; }},
      {"--checkpoint", [&](auto&, auto& v) { o.checkpoint = v; }},
      {"--checkpoint-every", [&](auto& f, auto& v) { o.checkpoint_every = parse_number<int64_t>(f, v, 0); }},
      {"--backup", [&](auto&, auto& v) { o.backup = v; }},
      {"--backup-every", [&](auto& f, auto& v) { o.backup_every = parse_number<int64_t>(f, v, 0); }},
      {"--metrics", [&](auto&, auto& v) { o.metrics = v; }},
      {"--csv", [&](auto&, auto& v) { o.csv = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v, 0); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--limit-train", [&](auto& f, auto& v) { o.limit_train = parse_number<int64_t>(f, v, 0); }},
      {"--limit-test", [&](auto& f, auto& v) { o.limit_test = parse_number<int64_t>(f, v, 0); }},
      {"--log-every", [&](auto& f, auto& v) { o.log_every = parse_number<int64_t>(f, v, 1); }},
      {"--progress", [&](auto& f, auto& v) { o.progress = one_of(f, v, {"auto", "bar", "lines", "none"}); }},
      {"--target-accuracy", [&](auto& f, auto& v) { o.target_accuracy = parse_number<double>(f, v); }},
      {"--compression", retired("--compression", "use --strategy multi_worker:compression=fp16")},
      {"--lr-scaling", retired("--lr-scaling", "--batch-size is global now and --lr is the rate for it")},
  };
  parse_flags(args, with_value,
              {{"--help", [&] { o.help = true; }},
               {"-h", [&] { o.help = true; }},
               {"--resume", [] { COHORT_THROW(ConfigError) << "--resume is gone: --backup DIR resumes by itself"; }}});
  COHORT_CHECK_AS(ConfigError, o.lr > 0) << "--lr must be positive, got " << o.lr;
  COHORT_CHECK_AS(ConfigError, o.warmup_epochs >= 0) << "--warmup-epochs must not be negative";
  COHORT_CHECK_AS(ConfigError, o.target_accuracy >= 0 && o.target_accuracy <= 100)
      << "--target-accuracy is a percentage, got " << o.target_accuracy;
  return o;
}

}  // namespace cohort::examples
