// Synthetic click data for the recommender example, and AUC (torch-free).
//
// Users and items are drawn from Zipf distributions (a few ids are very
// popular, most are rare), each id scrambled by a fixed bijection so that
// popular ids spread over the table's shards, as hashed ids do. Whether a
// user clicks an item follows a hidden model: both have latent vectors of
// `latent` dimensions derived from their ids, and
//   P(click) = sigmoid(scale * <z_user, z_item> / sqrt(latent) + bias).
// A batch depends only on (seed, stream, index), so every worker draws its
// own batches and a held-out set is the same on every run.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cohort::examples::recommender {

// Zipf(s) over {1..n} by rejection-inversion (Hörmann and Derflinger):
// O(1) per draw, no table, so n may be tens of millions.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double exponent);
  // A draw in [1, n] from uniforms produced by `next_unit` (in (0, 1)).
  template <typename Uniform>
  int64_t draw(Uniform&& next_unit) const;

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;
  int64_t n_;
  double exponent_, h_integral_x1_, h_integral_n_, s_;
};

struct ClickModel {
  int64_t users = 5'000'000;
  int64_t items = 5'000'000;
  double zipf = 1.05;
  int latent = 8;
  double scale = 4.0;
  double bias = -1.0;
  uint64_t seed = 42;
};

struct ClickBatch {
  std::vector<int64_t> ids;    // rows x 2: user row, item row (items after users in the table)
  std::vector<float> labels;   // 1 clicked, 0 not
  std::vector<double> truth;   // the hidden click probability (for the AUC ceiling)
};

class ClickGenerator {
 public:
  explicit ClickGenerator(ClickModel model);
  // Batch `index` of stream `stream` (a worker, or the held-out set).
  ClickBatch batch(uint64_t stream, uint64_t index, int64_t rows) const;
  const ClickModel& model() const { return model_; }
  int64_t table_rows() const { return model_.users + model_.items; }

 private:
  ClickModel model_;
  ZipfSampler users_, items_;
};

// Area under the ROC curve of `scores` against 0/1 `labels` (ties count
// half), by the rank-sum formula; 0.5 when one class is missing.
double auc(std::span<const double> scores, std::span<const float> labels);

}  // namespace cohort::examples::recommender
