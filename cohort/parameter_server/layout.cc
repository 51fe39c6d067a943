#include "cohort/parameter_server/layout.h"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <set>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::ps {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform in (0, 1) from a counter.
double unit(uint64_t seed, uint64_t counter) {
  return (static_cast<double>(splitmix(seed ^ splitmix(counter)) >> 11) + 0.5) / 9007199254740992.0;
}

const char* kind_name(Initializer::Kind k) {
  switch (k) {
    case Initializer::Kind::given: return "given";
    case Initializer::Kind::zeros: return "zeros";
    case Initializer::Kind::uniform: return "uniform";
    case Initializer::Kind::normal: return "normal";
  }
  return "given";
}

}  // namespace

std::string Initializer::encode() const {
  std::ostringstream s;
  s.precision(17);
  s << kind_name(kind) << ':' << a << ':' << b << ':' << seed;
  return s.str();
}

Initializer Initializer::decode(const std::string& text) {
  std::istringstream s(text);
  std::string kind, a, b, seed;
  std::getline(s, kind, ':');
  std::getline(s, a, ':');
  std::getline(s, b, ':');
  std::getline(s, seed, ':');
  Initializer init;
  bool known = false;
  for (Kind k : {Kind::given, Kind::zeros, Kind::uniform, Kind::normal})
    if (kind == kind_name(k)) init.kind = k, known = true;
  COHORT_CHECK(known && !seed.empty()) << "malformed initializer '" << text << "'";
  init.a = std::stod(a);
  init.b = std::stod(b);
  init.seed = std::stoull(seed);
  return init;
}

void Initializer::fill(DType dtype, int64_t row_begin, int64_t row_end, int64_t cols, void* out) const {
  COHORT_CHECK(kind != Kind::given) << "a given initializer has no values to generate";
  const int64_t n = (row_end - row_begin) * cols;
  const uint64_t first = static_cast<uint64_t>(row_begin * cols);
  auto value = [&](uint64_t i) -> double {
    switch (kind) {
      case Kind::uniform: return a + (b - a) * unit(seed, i);
      case Kind::normal: {
        // Box-Muller from two independent uniforms of this element.
        const double u1 = unit(seed, 2 * i), u2 = unit(seed, 2 * i + 1);
        return a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      }
      default: return 0.0;
    }
  };
  if (dtype == DType::f64) {
    double* p = static_cast<double*>(out);
    for (int64_t i = 0; i < n; ++i) p[i] = value(first + i);
  } else {
    float* p = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value(first + i));
  }
}

int shard_count(int64_t rows, int64_t row_bytes, const PartitionOptions& options, int partitions) {
  if (rows <= 1) return 1;
  int64_t n = 0;
  if (options.num_shards > 0) {
    n = options.num_shards;
  } else {
    const int64_t cap = options.max_shards > 0 ? options.max_shards : partitions;
    n = std::min<int64_t>(cap, std::max<int64_t>(1, rows * row_bytes / std::max<int64_t>(1, options.min_shard_bytes)));
  }
  return static_cast<int>(std::clamp<int64_t>(n, 1, rows));
}

std::vector<std::pair<int64_t, int64_t>> split_rows(int64_t rows, int num_shards) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const int64_t base = rows / num_shards, extra = rows % num_shards;
  int64_t begin = 0;
  for (int s = 0; s < num_shards; ++s) {
    const int64_t end = begin + base + (s < extra ? 1 : 0);
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

Layout Layout::build(std::vector<VariableSpec> variables, int partitions, const PartitionOptions& options) {
  COHORT_CHECK_AS(ConfigError, partitions >= 1) << "a layout needs at least one partition, not " << partitions;
  std::set<std::string> names;
  for (const auto& v : variables) {
    COHORT_CHECK_AS(ConfigError, !v.name.empty()) << "a parameter-server variable needs a name";
    COHORT_CHECK_AS(ConfigError, names.insert(v.name).second) << "variable '" << v.name << "' is declared twice";
    COHORT_CHECK_AS(ConfigError, v.rows >= 0 && v.cols >= 1)
        << "variable '" << v.name << "' has shape " << v.rows << " x " << v.cols << " (need rows >= 0, cols >= 1)";
    COHORT_CHECK_AS(ConfigError, v.dtype == DType::f32 || v.dtype == DType::f64)
        << "variable '" << v.name << "' is " << dtype_name(v.dtype) << "; parameter servers hold f32 or f64";
  }
  Layout layout;
  layout.partitions_ = partitions;
  layout.variables_ = std::move(variables);
  std::vector<ShardInfo*> all;
  layout.shards_.resize(layout.variables_.size());
  for (uint32_t v = 0; v < layout.variables_.size(); ++v) {
    const VariableSpec& spec = layout.variables_[v];
    const int n = shard_count(spec.rows, spec.row_bytes(), options, partitions);
    uint32_t index = 0;
    for (const auto& [begin, end] : split_rows(spec.rows, n))
      layout.shards_[v].push_back({.variable = v, .index = index++, .row_begin = begin, .row_end = end});
  }
  for (auto& shards : layout.shards_)
    for (auto& s : shards) all.push_back(&s);
  // Largest first onto the lightest partition (LPT): within 4/3 of the best
  // balance, and deterministic because ties keep declaration order.
  std::stable_sort(all.begin(), all.end(), [&](const ShardInfo* a, const ShardInfo* b) {
    return a->rows() * layout.variables_[a->variable].row_bytes() >
           b->rows() * layout.variables_[b->variable].row_bytes();
  });
  std::vector<int64_t> load(partitions, 0);
  for (ShardInfo* s : all) {
    const int p = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    s->partition = p;
    load[p] += s->rows() * layout.variables_[s->variable].row_bytes();
  }
  return layout;
}

uint32_t Layout::variable_index(const std::string& name) const {
  for (uint32_t v = 0; v < variables_.size(); ++v)
    if (variables_[v].name == name) return v;
  COHORT_THROW(ConfigError) << "no parameter-server variable named '" << name << "'";
}

const ShardInfo& Layout::shard_of_row(uint32_t v, int64_t row) const {
  const auto& shards = shards_.at(v);
  COHORT_CHECK(row >= 0 && row < variables_[v].rows)
      << "row " << row << " is outside variable '" << variables_[v].name << "' (" << variables_[v].rows << " rows)";
  const auto it = std::upper_bound(shards.begin(), shards.end(), row,
                                   [](int64_t r, const ShardInfo& s) { return r < s.row_end; });
  return *it;
}

std::vector<ShardInfo> Layout::partition_shards(int p) const {
  std::vector<ShardInfo> out;
  for (const auto& shards : shards_)
    for (const auto& s : shards)
      if (s.partition == p) out.push_back(s);
  return out;
}

int64_t Layout::partition_bytes(int p) const {
  int64_t bytes = 0;
  for (const auto& s : partition_shards(p)) bytes += s.rows() * variables_[s.variable].row_bytes();
  return bytes;
}

}  // namespace cohort::ps
