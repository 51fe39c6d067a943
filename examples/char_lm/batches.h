// Deterministic training batches of char_lm.
//
// Global batch `step` is `batch_size` windows of seq_len + 1 consecutive
// tokens (inputs are the first seq_len, targets the last seq_len); window
// row r starts at a position hashed from (seed, step, r). The hash is
// stateless, so any rank computes any rows without drawing the others, and
// the global batch is the same whatever the mesh: data-parallel replica d of
// `dp` takes rows [d * batch_size / dp, (d + 1) * batch_size / dp). That is
// what makes runs on different meshes comparable step by step.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::examples::char_lm {

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Rows of the global batch that replica `dp_rank` of `dp` trains on;
// ConfigError unless dp divides batch_size and 0 <= dp_rank < dp.
RowRange replica_rows(int64_t batch_size, int dp, int dp_rank);

class WindowBatches {
 public:
  // ConfigError when `tokens` holds fewer than seq_len + 2 tokens.
  WindowBatches(std::vector<int64_t> tokens, int64_t seq_len, uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  // Start of window `row` of global batch `step` in the token stream.
  int64_t window_start(int64_t step, int64_t row) const;
  // Rows [rows.begin, rows.end) of global batch `step`, row-major:
  // (rows.end - rows.begin) x (seq_len + 1) tokens.
  std::vector<int64_t> rows(int64_t step, RowRange rows) const;

 private:
  std::vector<int64_t> tokens_;
  int64_t seq_len_;
  uint64_t seed_;
};

}  // namespace cohort::examples::char_lm
