#include "examples/char_lm/batches.h"

#include "cohort/common/check.h"

namespace cohort::examples::char_lm {
namespace {

// SplitMix64's finaliser: a well-mixed 64-bit hash, the same on every
// platform (unlike the std:: distributions).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

RowRange replica_rows(int64_t batch_size, int dp, int dp_rank) {
  COHORT_CHECK_AS(ConfigError, dp >= 1 && dp_rank >= 0 && dp_rank < dp)
      << "data-parallel rank " << dp_rank << " outside [0, " << dp << ")";
  COHORT_CHECK_AS(ConfigError, batch_size % dp == 0)
      << "batch size " << batch_size << " does not split over " << dp << " data-parallel replicas";
  const int64_t per = batch_size / dp;
  return {per * dp_rank, per * (dp_rank + 1)};
}

WindowBatches::WindowBatches(std::vector<int64_t> tokens, int64_t seq_len, uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  COHORT_CHECK_AS(ConfigError, seq_len_ >= 1) << "sequence length must be at least 1, got " << seq_len_;
  COHORT_CHECK_AS(ConfigError, int64_t(tokens_.size()) >= seq_len_ + 2)
      << "the text has " << tokens_.size() << " characters, too few for windows of " << seq_len_ + 1;
}

int64_t WindowBatches::window_start(int64_t step, int64_t row) const {
  const uint64_t starts = uint64_t(tokens_.size()) - uint64_t(seq_len_);  // windows fit at [0, starts)
  const uint64_t h = mix(mix(mix(seed_) ^ uint64_t(step)) ^ uint64_t(row));
  return int64_t(h % starts);
}

std::vector<int64_t> WindowBatches::rows(int64_t step, RowRange rows) const {
  COHORT_CHECK_AS(ConfigError, rows.begin >= 0 && rows.end >= rows.begin)
      << "bad row range [" << rows.begin << ", " << rows.end << ")";
  std::vector<int64_t> out;
  out.reserve(size_t((rows.end - rows.begin) * (seq_len_ + 1)));
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const int64_t start = window_start(step, r);
    out.insert(out.end(), tokens_.begin() + start, tokens_.begin() + start + seq_len_ + 1);
  }
  return out;
}

}  // namespace cohort::examples::char_lm
