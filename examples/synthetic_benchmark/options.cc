#include "examples/synthetic_benchmark/options.h"

#include "cohort/common/check.h"
#include "cohort/common/flags.h"
#include "cohort/torch/strategy/make_strategy.h"

namespace cohort::examples::synthetic {

using namespace cohort::flags;
std::string usage() {
  return "usage: synthetic_benchmark [flags]\n"
         "Training throughput on synthetic 1x28x28 images, 10 classes, SGD with momentum 0.9\n"
         "(Horovod's pytorch_synthetic_benchmark.py). Under cohortrun for several ranks:\n"
         "  cohortrun -np 2 synthetic_benchmark --model cnn --strategy multi_worker:style=ddp\n\n"
         "  --model mlp|cnn|resnet  mlp: Linear 784-4096-4096-10 (~20M params); cnn: 3 convs\n"
         "                          (32,64,128) + Linear 6272-256-10 (~1.7M); resnet: a ResNet-8 for\n"
         "                          28x28 (conv16, residual stages 16/32/64 of one basic block with\n"
         "                          BatchNorm, stride 2 between stages, global average pool; ~78K) (mlp)\n"
         "  --width N               mlp: the hidden layers' width (4096)\n"
         "  --depth N               mlp: hidden layers (2): ~(N - 1) x width^2 parameters\n"
         "  --strategy SPEC          how to train in parallel (see below); or one of the shorthands:\n"
         "  --mode horovod|ddp|dp|single  multi_worker:style=horovod, multi_worker:style=ddp,\n"
         "                          mirrored:replicas=<--replicas>, or one_device on every rank\n"
         "                          alone (no communication: the floor) (ddp)\n"
         "  --batch-size N          examples per process per step (64)\n"
         "  --steps N               measured steps (20)\n"
         "  --warmup N              steps run before measuring (5)\n"
         "  --threads N             intra-op threads per rank (0: OMP_NUM_THREADS, as cohortrun sets it)\n"
         "  --lr X                  learning rate (0.01)\n"
         "  --replicas N            --mode dp: CPU replicas, one thread each (2)\n"
         "  --bucket-view 0|1       --mode ddp: gradient_as_bucket_view, .grad() aliases the buckets (1)\n"
         "  --quiet                 no per-step lines\n"
         "  --help                  this text\n"
         "Prints each measured step's time (the slowest rank's) and samples/s, then the median\n"
         "and one JSON line for scripts (bench/vs_pytorch_ddp.sh); under zero, the bytes each rank\n"
         "holds for parameters, gradients and optimizer state, and the estimate.\n\n"
         "Strategies:\n" + strategy_help();
}

std::string strategy_spec(const BenchmarkOptions& o) {
  if (!o.strategy.empty()) return o.strategy;
  if (o.mode == "single") return "one_device";
  if (o.mode == "dp") return "mirrored:replicas=" + std::to_string(o.replicas);
  return "multi_worker:style=" + o.mode + (o.mode == "ddp" ? std::string(",bucket_view=") + (o.bucket_view ? "true" : "false") : "");
}

BenchmarkOptions parse_options(const std::vector<std::string>& args) {
  BenchmarkOptions o;
  bool mode_given = false;
  const std::map<std::string, FlagSetter> with_value = {
      {"--model", [&](auto& f, auto& v) { o.model = one_of(f, v, {"mlp", "cnn", "resnet"}); }},
      {"--width", [&](auto& f, auto& v) { o.width = parse_number<int64_t>(f, v, 1); }},
      {"--depth", [&](auto& f, auto& v) { o.depth = parse_number<int>(f, v, 1); }},
      {"--strategy", [&](auto&, auto& v) { o.strategy = v; }},
      {"--mode", [&](auto& f, auto& v) { o.mode = one_of(f, v, {"horovod", "ddp", "dp", "single"}), mode_given = true; }},
      {"--batch-size", [&](auto& f, auto& v) { o.batch_size = parse_number<int>(f, v, 1); }},
      {"--steps", [&](auto& f, auto& v) { o.steps = parse_number<int>(f, v, 1); }},
      {"--warmup", [&](auto& f, auto& v) { o.warmup = parse_number<int>(f, v, 0); }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v, 0); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_number<double>(f, v, 0.0); }},
      {"--replicas", [&](auto& f, auto& v) { o.replicas = parse_number<int>(f, v, 1); }},
      {"--bucket-view", [&](auto& f, auto& v) { o.bucket_view = one_of(f, v, {"0", "1"}) == "1"; }},
  };
  parse_flags(args, with_value,
              {{"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}, {"--quiet", [&] { o.quiet = true; }}});
  COHORT_CHECK_AS(ConfigError, !(mode_given && !o.strategy.empty()))
      << "--mode and --strategy both given: --mode is a shorthand for a strategy, give one of them";
  return o;
}

}  // namespace cohort::examples::synthetic
