#include "cohort/parameter_server/sparse.h"

#include <algorithm>
#include <numeric>

#include "cohort/common/check.h"

namespace cohort::ps {

SparseBatch deduplicate(std::span<const int64_t> ids) {
  SparseBatch b;
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) { return ids[a] < ids[c]; });
  b.inverse.resize(ids.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t id = ids[order[k]];
    if (b.rows.empty() || b.rows.back() != id) b.rows.push_back(id);
    b.inverse[order[k]] = static_cast<int64_t>(b.rows.size()) - 1;
  }
  return b;
}

template <typename T>
std::vector<T> sum_rows(const SparseBatch& batch, std::span<const T> grads, int64_t cols) {
  COHORT_CHECK_EQ(grads.size(), batch.inverse.size() * static_cast<size_t>(cols)) << "gradient rows";
  std::vector<T> out(batch.rows.size() * cols, T(0));
  for (size_t i = 0; i < batch.inverse.size(); ++i)
    for (int64_t c = 0; c < cols; ++c) out[batch.inverse[i] * cols + c] += grads[i * cols + c];
  return out;
}

template std::vector<float> sum_rows<float>(const SparseBatch&, std::span<const float>, int64_t);
template std::vector<double> sum_rows<double>(const SparseBatch&, std::span<const double>, int64_t);

}  // namespace cohort::ps
