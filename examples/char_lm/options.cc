#include "examples/char_lm/options.h"

#include "cohort/common/check.h"
#include "cohort/common/flags.h"

namespace cohort::examples::char_lm {

using namespace cohort::flags;
std::string usage() {
  return R"(usage: char_lm [flags]
Trains a character-level transformer language model on the fortunes of Debian's
'fortunes' package with data (dp), pipeline (pp) and tensor (tp) parallelism;
--dp x --pp x --tp must equal the number of ranks:
  cohortrun -np 4 char_lm --dp 2 --pp 2 --tp 1 --steps 200

  --dp N                data-parallel replicas (1)
  --pp N                pipeline stages; the blocks are split over them (1)
  --tp N                tensor-parallel ranks inside every layer (1)
  --micro-batches N     micro-batches per step of each replica (4)
  --schedule gpipe|1f1b pipeline schedule (1f1b)
  --steps N             optimizer steps (200)
  --batch-size N        windows per step over all replicas (32)
  --seq-len N           characters per window (64)
  --lr X                learning rate (0.003)
  --optimizer adam|sgd  optimizer on each rank's parameter shards (adam)
  --momentum X          SGD momentum (0.9)
  --zero 0|1|2          ZeRO over the dp axis: 1 splits the optimizer state over
                        the dp replicas, 2 also the gradients (0: plain averaging)
  --seed N              weights and batches: equal seeds train the same model
                        whatever the mesh (42)
  --dtype float32|float64  parameters and activations; float64 shows that
                        every mesh computes the same losses (float32)
  --d-model N           width (64)
  --heads N             attention heads, split over --tp (4)
  --layers N            transformer blocks, split over --pp (4)
  --vocab-multiple N    pad the vocabulary to a multiple of N (8)
  --corpus DIR          fortune files (/usr/share/games/fortunes), or TFRecord text
                        records of them (cohort-data convert text), read through
                        the input pipeline
  --log-every N         steps between loss lines (10)
  --sample-chars N      length limit of the line sampled at the end (120)
  --temperature X       sampling temperature; 0 samples greedily (0.8)
  --prompt TEXT         the sampled line starts with TEXT
  --threads N           intra-op threads per rank (0: OMP_NUM_THREADS, as cohortrun sets it)
  --help                this text
)";
}

CharLmOptions parse_options(const std::vector<std::string>& args) {
  CharLmOptions o;
  const std::map<std::string, FlagSetter> with_value = {
      {"--dp", [&](auto& f, auto& v) { o.dp = parse_number<int>(f, v); }},
      {"--pp", [&](auto& f, auto& v) { o.pp = parse_number<int>(f, v); }},
      {"--tp", [&](auto& f, auto& v) { o.tp = parse_number<int>(f, v); }},
      {"--micro-batches", [&](auto& f, auto& v) { o.micro_batches = parse_number<int>(f, v); }},
      {"--schedule",
       [&](auto& f, auto& v) {
         o.schedule = one_of(f, v, {"gpipe", "1f1b"});
       }},
      {"--steps", [&](auto& f, auto& v) { o.steps = parse_number<int64_t>(f, v); }},
      {"--batch-size", [&](auto& f, auto& v) { o.batch_size = parse_number<int64_t>(f, v); }},
      {"--seq-len", [&](auto& f, auto& v) { o.seq_len = parse_number<int64_t>(f, v); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_number<double>(f, v); }},
      {"--optimizer",
       [&](auto& f, auto& v) {
         o.optimizer = one_of(f, v, {"adam", "sgd"});
       }},
      {"--momentum", [&](auto& f, auto& v) { o.momentum = parse_number<double>(f, v); }},
      {"--zero", [&](auto& f, auto& v) { o.zero = std::stoi(one_of(f, v, {"0", "1", "2"})); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--dtype",
       [&](auto& f, auto& v) {
         o.dtype = one_of(f, v, {"float32", "float64"});
       }},
      {"--d-model", [&](auto& f, auto& v) { o.d_model = parse_number<int64_t>(f, v); }},
      {"--heads", [&](auto& f, auto& v) { o.heads = parse_number<int64_t>(f, v); }},
      {"--layers", [&](auto& f, auto& v) { o.layers = parse_number<int64_t>(f, v); }},
      {"--vocab-multiple", [&](auto& f, auto& v) { o.vocab_multiple = parse_number<int64_t>(f, v); }},
      {"--corpus", [&](auto&, auto& v) { o.corpus = v; }},
      {"--log-every", [&](auto& f, auto& v) { o.log_every = parse_number<int64_t>(f, v); }},
      {"--sample-chars", [&](auto& f, auto& v) { o.sample_chars = parse_number<int64_t>(f, v); }},
      {"--temperature", [&](auto& f, auto& v) { o.temperature = parse_number<double>(f, v); }},
      {"--prompt", [&](auto&, auto& v) { o.prompt = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v); }},
  };
  parse_flags(args, with_value, {{"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}});
  COHORT_CHECK_AS(ConfigError, o.dp >= 1 && o.pp >= 1 && o.tp >= 1)
      << "--dp, --pp and --tp must be at least 1, got " << o.dp << ", " << o.pp << ", " << o.tp;
  COHORT_CHECK_AS(ConfigError, o.micro_batches >= 1) << "--micro-batches must be at least 1, got " << o.micro_batches;
  COHORT_CHECK_AS(ConfigError, o.steps >= 1) << "--steps must be at least 1, got " << o.steps;
  COHORT_CHECK_AS(ConfigError, o.batch_size >= 1) << "--batch-size must be at least 1, got " << o.batch_size;
  COHORT_CHECK_AS(ConfigError, o.seq_len >= 1) << "--seq-len must be at least 1, got " << o.seq_len;
  COHORT_CHECK_AS(ConfigError, o.lr > 0) << "--lr must be positive, got " << o.lr;
  COHORT_CHECK_AS(ConfigError, o.d_model >= 1 && o.heads >= 1 && o.layers >= 1)
      << "--d-model, --heads and --layers must be at least 1";
  COHORT_CHECK_AS(ConfigError, o.d_model % o.heads == 0)
      << "--d-model " << o.d_model << " must be a multiple of --heads " << o.heads;
  COHORT_CHECK_AS(ConfigError, o.vocab_multiple >= 1) << "--vocab-multiple must be at least 1";
  COHORT_CHECK_AS(ConfigError, o.log_every >= 1) << "--log-every must be at least 1, got " << o.log_every;
  COHORT_CHECK_AS(ConfigError, o.sample_chars >= 0) << "--sample-chars must not be negative";
  COHORT_CHECK_AS(ConfigError, o.temperature >= 0) << "--temperature must not be negative, got " << o.temperature;
  COHORT_CHECK_AS(ConfigError, o.threads >= 0) << "--threads must not be negative";
  return o;
}

void check_world(const CharLmOptions& o, int world_size) {
  COHORT_CHECK_AS(ConfigError, int64_t(o.dp) * o.pp * o.tp == world_size)
      << "--dp " << o.dp << " x --pp " << o.pp << " x --tp " << o.tp << " = " << int64_t(o.dp) * o.pp * o.tp
      << " ranks, but the job has " << world_size << " (run it under cohortrun -np " << int64_t(o.dp) * o.pp * o.tp
      << ", or change the flags)";
  COHORT_CHECK_AS(ConfigError, o.layers >= o.pp)
      << "--layers " << o.layers << " cannot fill --pp " << o.pp << " stages (every stage needs a block)";
  COHORT_CHECK_AS(ConfigError, o.heads % o.tp == 0)
      << "--heads " << o.heads << " must be a multiple of --tp " << o.tp << " (heads are split over tp ranks)";
  COHORT_CHECK_AS(ConfigError, o.vocab_multiple % o.tp == 0)
      << "--vocab-multiple " << o.vocab_multiple << " must be a multiple of --tp " << o.tp
      << " (the vocabulary is split over tp ranks)";
  COHORT_CHECK_AS(ConfigError, o.batch_size % (int64_t(o.dp) * o.micro_batches) == 0)
      << "--batch-size " << o.batch_size << " must be a multiple of --dp " << o.dp << " x --micro-batches "
      << o.micro_batches << " = " << int64_t(o.dp) * o.micro_batches;
}

}  // namespace cohort::examples::char_lm
