// Command-line flags of the char_lm example.
//
// Flags take "--flag value" or "--flag=value". parse_options() throws
// ConfigError naming a bad flag or value; check_world() throws ConfigError
// when --dp x --pp x --tp does not match the job's world size or the model
// cannot be split that way. main() prints the message on one line and exits 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::examples::char_lm {

struct CharLmOptions {
  // Parallelism: the job's ranks form a dp x pp x tp mesh.
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int micro_batches = 4;          // per step and per data-parallel replica
  std::string schedule = "1f1b";  // "gpipe" or "1f1b"
  // Training.
  int64_t steps = 200;
  int64_t batch_size = 32;  // global: windows per step over all replicas
  int64_t seq_len = 64;     // characters predicted per window
  double lr = 3e-3;
  std::string optimizer = "adam";  // "adam" or "sgd"
  double momentum = 0.9;           // sgd only
  int zero = 0;                    // ZeRO stage over dp (0: off; 1: optimizer state, 2: and gradients)
  uint64_t seed = 42;              // weights and batches
  std::string dtype = "float32";   // "float32" or "float64" (parameters and activations)
  // Model.
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 4;
  int64_t vocab_multiple = 8;  // pad the vocabulary to a multiple of this (tp must divide it)
  // Data and output.
  std::string corpus = "/usr/share/games/fortunes";
  int64_t log_every = 10;
  int64_t sample_chars = 120;  // at most this many characters in the sampled line
  double temperature = 0.8;    // 0: greedy
  std::string prompt;          // the sampled line starts with it
  int threads = 0;             // intra-op threads per rank; 0: LibTorch's default
  bool help = false;
};

CharLmOptions parse_options(const std::vector<std::string>& args);

// Checks the options against a job of `world_size` ranks (ConfigError).
void check_world(const CharLmOptions& options, int world_size);

std::string usage();

}  // namespace cohort::examples::char_lm
