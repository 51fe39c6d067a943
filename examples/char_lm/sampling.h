// Sampling a line of text from a char_lm model.
//
// The model is a function from ids (1, n) to full logits (1, n, vocab):
// the parallel model run forward through its pipeline (main.cc), or the
// one-rank model (dense_logits, model.h). One character at a time is drawn
// from the logits of the last position, over the last `context` characters,
// from softmax(logits / temperature) with a private generator seeded from
// `seed` (temperature 0: the most likely one); padded vocabulary ids are
// never drawn. Every rank that runs the same function on the same logits
// draws the same characters, so all the ranks of a mesh sample together. Prompt bytes the vocabulary lacks are read
// as its fallback character (vocabulary.h) but printed as given.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "examples/char_lm/vocabulary.h"

namespace cohort::examples::char_lm {

struct SampleOptions {
  std::string prompt;       // the line starts with it
  int64_t max_chars = 120;  // characters generated after the prompt, at most
  double temperature = 0.8;
  uint64_t seed = 42;
};

// The model: ids (1, n) -> logits (1, n, >= vocab.size()); padded ids'
// logits are ignored.
using LogitsFn = std::function<at::Tensor(const at::Tensor& ids)>;

// The prompt followed by generated characters up to (not including) the
// first newline that follows a character (newlines before it, the gap
// between fortunes, are skipped), or until max_chars characters have been
// drawn. `context` >= 1 is the model's longest input.
std::string sample_line(const LogitsFn& logits, int64_t context, const Vocabulary& vocab, const SampleOptions& options);

}  // namespace cohort::examples::char_lm
