#include "examples/char_lm/sampling.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort::examples::char_lm {

std::string sample_line(const LogitsFn& logits_fn, int64_t context_len, const Vocabulary& vocab,
                        const SampleOptions& options) {
  COHORT_CHECK_AS(ConfigError, options.temperature >= 0)
      << "sampling temperature must not be negative, got " << options.temperature;
  COHORT_CHECK_AS(ConfigError, context_len >= 1) << "sampling context must be at least 1, got " << context_len;
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  // Without a prompt the line starts where a fortune does: after a newline.
  std::vector<int64_t> context = vocab.encode(options.prompt.empty() ? std::string("\n") : options.prompt);
  std::string line = options.prompt;
  for (int64_t i = 0; i < options.max_chars; ++i) {
    const int64_t n = std::min<int64_t>(int64_t(context.size()), context_len);
    const at::Tensor ids =
        at::tensor(std::vector<int64_t>(context.end() - n, context.end()), at::kLong).reshape({1, n});
    const at::Tensor all = logits_fn(ids);
    COHORT_CHECK_AS(ConfigError, all.dim() == 3 && all.size(0) == 1 && all.size(1) == n && all.size(2) >= vocab.size())
        << "sampling: the model returned logits " << all.sizes() << " for ids (1, " << n << "), expected (1, " << n
        << ", >= " << vocab.size() << ")";
    // Padded ids are not characters: only the vocabulary's logits count.
    const at::Tensor logits = all[0][n - 1].narrow(0, 0, vocab.size()).to(at::kDouble);
    int64_t id;
    if (options.temperature == 0) {
      id = logits.argmax().item<int64_t>();
    } else {
      const at::Tensor probs = at::softmax(logits / options.temperature, 0);
      id = at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
    }
    const char c = vocab.byte_of(id);
    context.push_back(id);
    // Newlines before the first character are the gap between fortunes:
    // context, not the line.
    if (c == '\n' && line.empty()) continue;
    if (c == '\n') break;
    line.push_back(c);
  }
  return line;
}

}  // namespace cohort::examples::char_lm
