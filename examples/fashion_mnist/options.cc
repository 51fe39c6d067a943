#include "examples/fashion_mnist/options.h"

#include <sstream>

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
  --model mlp|cnn|tanh_cnn  network (cnn; tanh_cnn: the small DP-SGD network)
  --data-dir DIR        where the IDX files are (/usr/share/datasets/fashion-mnist)
  --data-format idx|tfrecord  read the IDX files (idx), or TFRecord shards through
                        cohort's input pipeline, normalised by a distributed
                        analyzer pass (tfrecord; needs --data)
  --data DIR            the shards: DIR/train*.tfrecord and DIR/test*.tfrecord, as
                        `cohort-data convert idx --prefix train|test` writes them
  --augment             tfrecord: random crop (4 px padding) and flip per sample
  --workers N           tfrecord: pipeline threads per process (0: autotuned)
  --transform FILE      tfrecord: save the transform artifact (decode, the analyzer's
                        mean and deviation, reshape) for fashion_mnist_serve
  --predictions FILE    write the test set's predicted classes, one per line
  --checkpoint FILE     save the model after every epoch (the chief, atomically; under zero a
                        directory of shards, every process writing its own)
  --checkpoint-every N  also every N steps
  --backup DIR          back up the whole run to DIR at every epoch end and on
                        SIGTERM/SIGINT, and resume from it when it is there
  --backup-every N      also every N steps
  --metrics FILE        JSON lines: start, a step line every --log-every steps, epochs, end
  --csv FILE            the per-epoch history as CSV
  --plot PREFIX         the history as charts: PREFIX-loss.png, PREFIX-accuracy.png
  --tensorboard DIR     TensorBoard event files (Keras's tags) in DIR/train and DIR/validation,
                        batch scalars every --log-every steps
  --threads N           intra-op threads per process (0: OMP_NUM_THREADS, as cohortrun sets it)
  --seed N              model initialisation and data order (42)
  --limit-train N       train on the first N examples only (all)
  --limit-test N        test on the first N examples only (all)
  --log-every N         steps between metric lines (100)
  --progress auto|bar|lines|none  progress display (auto: a bar on a terminal)
  --target-accuracy P   exit with status 3 when the final test accuracy is below P percent
  --dp-epsilon E        train with differential privacy (DP-SGD, or DP-Adam with
                        --optimizer adam) spending at most E over all epochs:
                        the noise multiplier is searched for; Poisson sampling
                        with expected batch --batch-size; epsilon is printed
                        after every epoch. Strategies: one_device, multi_worker.
                        The --dp-* flags are shorthands for the privacy wrapper:
                        --strategy multi_worker+privacy:epsilon=3,max_grad_norm=1
  --dp-noise-multiplier S  or private training with noise multiplier S
  --dp-delta D          the delta of epsilon (1e-5)
  --dp-max-grad-norm C  per-sample gradient clipping norm (1)
  --dp-clipping flat|per_layer  clip the whole gradient or each layer (flat)
  --dp-accountant rdp|prv  (rdp)
  --dp-secure-noise     draw the noise from OpenSSL's CSPRNG
  --help                this text

Exit status: 0 done, 2 bad flags, 3 below --target-accuracy, 75 preempted
(backed up to --backup; run the same command again to resume).

Strategies (--strategy NAME[:key=value,...]):
)" + strategy_help();
}

std::string TrainOptions::strategy_spec() const {
  if (!dp()) return strategy;
  std::ostringstream spec;
  spec << strategy << "+privacy:" << (dp_epsilon > 0 ? "epsilon=" : "noise_multiplier=")
       << (dp_epsilon > 0 ? dp_epsilon : dp_noise_multiplier) << ",delta=" << dp_delta
       << ",max_grad_norm=" << dp_max_grad_norm << ",clipping=" << dp_clipping << ",accountant=" << dp_accountant
       << ",seed=" << seed << ",secure_noise=" << (dp_secure_noise ? "true" : "false");
  return spec.str();
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
      {"--optimizer",
       [&](auto& f, auto& v) {
         o.optimizer = one_of(f, v, {"sgd", "adam"});
       }},
      {"--momentum", [&](auto& f, auto& v) { o.momentum = parse_number<double>(f, v); }},
      {"--model",
       [&](auto& f, auto& v) {
         o.model = one_of(f, v, {"mlp", "cnn", "tanh_cnn"});
       }},
      {"--data-dir", [&](auto&, auto& v) { o.data_dir = v; }},
      {"--data-format",
       [&](auto& f, auto& v) {
         o.data_format = one_of(f, v, {"idx", "tfrecord"});
       }},
      {"--data", [&](auto&, auto& v) { o.data = v; }},
      {"--workers", [&](auto& f, auto& v) { o.workers = parse_number<int>(f, v, 0); }},
      {"--transform", [&](auto&, auto& v) { o.transform = v; }},
      {"--predictions", [&](auto&, auto& v) { o.predictions = v; }},
      {"--checkpoint", [&](auto&, auto& v) { o.checkpoint = v; }},
      {"--checkpoint-every", [&](auto& f, auto& v) { o.checkpoint_every = parse_number<int64_t>(f, v, 0); }},
      {"--backup", [&](auto&, auto& v) { o.backup = v; }},
      {"--backup-every", [&](auto& f, auto& v) { o.backup_every = parse_number<int64_t>(f, v, 0); }},
      {"--metrics", [&](auto&, auto& v) { o.metrics = v; }},
      {"--csv", [&](auto&, auto& v) { o.csv = v; }},
      {"--plot", [&](auto&, auto& v) { o.plot = v; }},
      {"--tensorboard", [&](auto&, auto& v) { o.tensorboard = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v, 0); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--limit-train", [&](auto& f, auto& v) { o.limit_train = parse_number<int64_t>(f, v, 0); }},
      {"--limit-test", [&](auto& f, auto& v) { o.limit_test = parse_number<int64_t>(f, v, 0); }},
      {"--log-every", [&](auto& f, auto& v) { o.log_every = parse_number<int64_t>(f, v, 1); }},
      {"--progress",
       [&](auto& f, auto& v) {
         o.progress = one_of(f, v, {"auto", "bar", "lines", "none"});
       }},
      {"--target-accuracy", [&](auto& f, auto& v) { o.target_accuracy = parse_number<double>(f, v); }},
      {"--dp-epsilon", [&](auto& f, auto& v) { o.dp_epsilon = parse_number<double>(f, v); }},
      {"--dp-noise-multiplier", [&](auto& f, auto& v) { o.dp_noise_multiplier = parse_number<double>(f, v); }},
      {"--dp-delta", [&](auto& f, auto& v) { o.dp_delta = parse_number<double>(f, v); }},
      {"--dp-max-grad-norm", [&](auto& f, auto& v) { o.dp_max_grad_norm = parse_number<double>(f, v); }},
      {"--dp-clipping",
       [&](auto& f, auto& v) {
         o.dp_clipping = one_of(f, v, {"flat", "per_layer"});
       }},
      {"--dp-accountant",
       [&](auto& f, auto& v) {
         o.dp_accountant = one_of(f, v, {"rdp", "prv"});
       }},
      {"--compression", retired("--compression", "use --strategy multi_worker:compression=fp16")},
      {"--lr-scaling", retired("--lr-scaling", "--batch-size is global now and --lr is the rate for it")},
  };
  parse_flags(args, with_value,
              {{"--help", [&] { o.help = true; }},
               {"--augment", [&] { o.augment = true; }},
               {"--dp-secure-noise", [&] { o.dp_secure_noise = true; }},
               {"-h", [&] { o.help = true; }},
               {"--resume", [] { COHORT_THROW(ConfigError) << "--resume is gone: --backup DIR resumes by itself"; }}});
  COHORT_CHECK_AS(ConfigError, o.data_format == "idx" || !o.data.empty())
      << "--data-format tfrecord needs --data DIR (the shards of cohort-data convert)";
  COHORT_CHECK_AS(ConfigError, o.data_format == "tfrecord" || (o.data.empty() && !o.augment && o.transform.empty()))
      << "--data, --augment and --transform are for --data-format tfrecord";
  COHORT_CHECK_AS(ConfigError, o.lr > 0) << "--lr must be positive, got " << o.lr;
  COHORT_CHECK_AS(ConfigError, o.warmup_epochs >= 0) << "--warmup-epochs must not be negative";
  COHORT_CHECK_AS(ConfigError, o.dp_epsilon >= 0) << "--dp-epsilon must be positive, got " << o.dp_epsilon;
  COHORT_CHECK_AS(ConfigError, o.dp_noise_multiplier >= 0)
      << "--dp-noise-multiplier must not be negative, got " << o.dp_noise_multiplier;
  COHORT_CHECK_AS(ConfigError, o.dp_epsilon == 0 || o.dp_noise_multiplier == 0)
      << "give --dp-epsilon or --dp-noise-multiplier, not both";
  COHORT_CHECK_AS(ConfigError, o.dp_delta > 0 && o.dp_delta < 1) << "--dp-delta must be in (0, 1), got " << o.dp_delta;
  COHORT_CHECK_AS(ConfigError, o.dp_max_grad_norm > 0)
      << "--dp-max-grad-norm must be positive, got " << o.dp_max_grad_norm;
  COHORT_CHECK_AS(ConfigError, o.target_accuracy >= 0 && o.target_accuracy <= 100)
      << "--target-accuracy is a percentage, got " << o.target_accuracy;
  return o;
}

}  // namespace cohort::examples
