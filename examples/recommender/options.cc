#include "examples/recommender/options.h"

#include "cohort/common/check.h"
#include "cohort/common/flags.h"

namespace cohort::examples::recommender {

using namespace cohort::flags;

std::string usage() {
  return R"(usage: recommender [flags]
Trains a click-through model with a large embedding table held by parameter
servers: each worker pulls and pushes only the rows its batch touches.
Synthetic clicks with Zipf-distributed users and items; prints loss and the
held-out AUC.
  cohortrun -np 4 recommender --strategy parameter_server:servers=2,optimizer=adagrad,lr=0.05

  --strategy SPEC    parameter_server:KEY=VALUE,... (servers, staleness, optimizer,
                     lr, replicas, ...; the last `servers` ranks serve), or
                     allreduce (every worker holds the table; for comparison)
                     (parameter_server:servers=1,optimizer=adagrad,lr=0.05)
  --rows N           embedding rows, users and items half each (10000000)
  --dim N            embedding width (64)
  --hidden N         width of the dense tower (64)
  --batch N          examples per worker per step (1024)
  --steps N          training steps (300)
  --zipf X           Zipf exponent of user and item popularity (1.05)
  --seed N           data and initial weights (42)
  --eval-every N     steps between held-out evaluations on the chief (100)
  --eval-batches N   held-out batches of --batch examples (8)
  --log-every N      steps between training-loss lines (20)
  --slow X           worker 1 takes X times as long per step (1: no straggler)
  --metrics FILE     the chief appends one JSON line per evaluation
  --threads N        intra-op threads per rank (0: OMP_NUM_THREADS)
  --help             this text
)";
}

RecommenderOptions parse_options(const std::vector<std::string>& args) {
  RecommenderOptions o;
  const std::map<std::string, FlagSetter> with_value = {
      {"--strategy", [&](auto&, auto& v) { o.strategy = v; }},
      {"--rows", [&](auto& f, auto& v) { o.rows = parse_number<int64_t>(f, v, int64_t{2}); }},
      {"--dim", [&](auto& f, auto& v) { o.dim = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--hidden", [&](auto& f, auto& v) { o.hidden = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--batch", [&](auto& f, auto& v) { o.batch = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--steps", [&](auto& f, auto& v) { o.steps = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--zipf", [&](auto& f, auto& v) { o.zipf = parse_number<double>(f, v); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--eval-every", [&](auto& f, auto& v) { o.eval_every = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--eval-batches", [&](auto& f, auto& v) { o.eval_batches = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--log-every", [&](auto& f, auto& v) { o.log_every = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--slow", [&](auto& f, auto& v) { o.slow = parse_number<double>(f, v); }},
      {"--metrics", [&](auto&, auto& v) { o.metrics = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v, 0); }},
  };
  parse_flags(args, with_value, {{"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}});
  COHORT_CHECK_AS(ConfigError, o.zipf > 0) << "--zipf must be positive, got " << o.zipf;
  COHORT_CHECK_AS(ConfigError, o.slow >= 1) << "--slow must be at least 1, got " << o.slow;
  COHORT_CHECK_AS(ConfigError, o.strategy == "allreduce" || o.strategy.starts_with("parameter_server"))
      << "--strategy '" << o.strategy << "' must be parameter_server[:KEY=VALUE,...] or allreduce";
  return o;
}

}  // namespace cohort::examples::recommender
