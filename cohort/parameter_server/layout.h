// Layout: which rows of which variable live in which partition.
//
// Every variable is split along dimension 0 into contiguous row ranges
// (TensorFlow's "div" sharding: 13 rows on 5 shards are 3,3,3,2,2), as many
// as the PartitionOptions ask for; the shards of all variables are then
// spread over the partitions largest first, each onto the partition holding
// the fewest bytes so far, which balances bytes across servers. A partition
// is a logical server: partition p starts on server p and moves as a whole to
// another server when p dies.
//
// Layout::build is a pure function of its inputs: every worker computes the
// same layout from the same variable list, with no message exchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/common/dtype.h"
#include "cohort/parameter_server/options.h"

namespace cohort::ps {

// How a server fills a new shard when the worker sends no values (a table
// too large for one process): element (row, col) is a function of the seed
// and its global position only, so every layout gives the same table.
struct Initializer {
  enum class Kind : uint8_t { given, zeros, uniform, normal };
  Kind kind = Kind::given;  // given: the declaring worker sends the values
  double a = 0, b = 0;      // uniform: [a, b); normal: mean a, standard deviation b
  uint64_t seed = 0;

  static Initializer uniform(double low, double high, uint64_t seed) { return {Kind::uniform, low, high, seed}; }
  static Initializer normal(double mean, double stddev, uint64_t seed) { return {Kind::normal, mean, stddev, seed}; }
  static Initializer zeros() { return {Kind::zeros, 0, 0, 0}; }
  std::string encode() const;  // "uniform:-0.1:0.1:7"
  static Initializer decode(const std::string& text);
  // Fills rows [row_begin, row_end) of a variable of `cols` columns.
  void fill(DType dtype, int64_t row_begin, int64_t row_end, int64_t cols, void* out) const;
};

struct VariableSpec {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 1;  // elements per row: the product of dimensions 1..n
  DType dtype = DType::f32;
  bool sparse = false;  // pushed and pulled by rows (embedding tables)
  Initializer init;     // given (the default) or generated on the servers

  int64_t row_bytes() const { return cols * static_cast<int64_t>(dtype_size(dtype)); }
  int64_t bytes() const { return rows * row_bytes(); }
};

struct ShardInfo {
  uint32_t variable = 0;
  uint32_t index = 0;  // shard number within the variable, in row order
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int partition = 0;

  int64_t rows() const { return row_end - row_begin; }
};

// How many shards a variable of `rows` rows of `row_bytes` bytes gets.
int shard_count(int64_t rows, int64_t row_bytes, const PartitionOptions& options, int partitions);

// The row ranges of `num_shards` "div" shards of `rows` rows: the first
// rows % num_shards shards have one row more.
std::vector<std::pair<int64_t, int64_t>> split_rows(int64_t rows, int num_shards);

class Layout {
 public:
  Layout() = default;
  // Throws ConfigError for a variable with no name, a duplicate name,
  // negative rows, cols < 1, a dtype other than f32/f64, or partitions < 1.
  static Layout build(std::vector<VariableSpec> variables, int partitions, const PartitionOptions& options);

  int partitions() const { return partitions_; }
  const std::vector<VariableSpec>& variables() const { return variables_; }
  const VariableSpec& variable(uint32_t v) const { return variables_.at(v); }
  // The variable called `name`; ConfigError when there is none.
  uint32_t variable_index(const std::string& name) const;

  // The shards of variable v in row order.
  const std::vector<ShardInfo>& shards(uint32_t v) const { return shards_.at(v); }
  // The shard of variable v holding `row` (0 <= row < rows).
  const ShardInfo& shard_of_row(uint32_t v, int64_t row) const;
  // Every shard of partition p, by (variable, index).
  std::vector<ShardInfo> partition_shards(int p) const;
  int64_t partition_bytes(int p) const;

 private:
  int partitions_ = 0;
  std::vector<VariableSpec> variables_;
  std::vector<std::vector<ShardInfo>> shards_;
};

}  // namespace cohort::ps
