#include "examples/recommender/clicks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cohort/common/check.h"

namespace cohort::examples::recommender {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double unit_of(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) / 9007199254740992.0; }

// log1p(x) / x and expm1(x) / x, continuous at 0.
double log1p_over(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x / 2 + x * x / 3; }
double expm1_over(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x / 2 + x * x / 6; }

// A bijection of [0, n): an affine map with a multiplier coprime to n.
int64_t scramble(int64_t k, int64_t n, uint64_t seed) {
  uint64_t a = (mix(seed) % static_cast<uint64_t>(n)) | 1;
  while (std::gcd(a, static_cast<uint64_t>(n)) != 1) a += 2;
  const uint64_t b = mix(seed + 1) % static_cast<uint64_t>(n);
  return static_cast<int64_t>((static_cast<unsigned __int128>(a) * static_cast<uint64_t>(k) + b) %
                              static_cast<uint64_t>(n));
}

}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double exponent) : n_(n), exponent_(exponent) {
  COHORT_CHECK_AS(ConfigError, n >= 1 && exponent > 0) << "Zipf needs n >= 1 and an exponent > 0";
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
  s_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-exponent_ * std::log(x)); }

// The integral of h from 1 to x, shifted: ((x^(1-s)) - 1) / (1 - s).
double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return expm1_over((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // rounding at the far end
  return std::exp(log1p_over(t) * x);
}

template <typename Uniform>
int64_t ZipfSampler::draw(Uniform&& next_unit) const {
  while (true) {
    const double u = h_integral_n_ + next_unit() * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    int64_t k = static_cast<int64_t>(x + 0.5);
    k = std::clamp<int64_t>(k, 1, n_);
    if (static_cast<double>(k) - x <= s_ || u >= h_integral(static_cast<double>(k) + 0.5) - h(static_cast<double>(k)))
      return k;
  }
}

ClickGenerator::ClickGenerator(ClickModel model)
    : model_(model), users_(model.users, model.zipf), items_(model.items, model.zipf) {}

ClickBatch ClickGenerator::batch(uint64_t stream, uint64_t index, int64_t rows) const {
  ClickBatch b;
  b.ids.resize(rows * 2);
  b.labels.resize(rows);
  b.truth.resize(rows);
  uint64_t counter = mix(mix(model_.seed ^ mix(stream)) ^ index);
  auto next_unit = [&] { return unit_of(mix(counter++)); };
  auto latent = [&](uint64_t id, int d) { return unit_of(mix(mix(model_.seed * 31 + id) + d)) * 2 - 1; };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t user = scramble(users_.draw(next_unit) - 1, model_.users, model_.seed);
    const int64_t item = scramble(items_.draw(next_unit) - 1, model_.items, model_.seed + 7);
    double dot = 0;
    for (int d = 0; d < model_.latent; ++d)
      dot += latent(static_cast<uint64_t>(user), d) * latent(static_cast<uint64_t>(model_.users + item), d);
    const double logit = model_.scale * dot / std::sqrt(static_cast<double>(model_.latent)) + model_.bias;
    const double p = 1.0 / (1.0 + std::exp(-logit));
    b.ids[2 * r] = user;
    b.ids[2 * r + 1] = model_.users + item;
    b.truth[r] = p;
    b.labels[r] = next_unit() < p ? 1.0f : 0.0f;
  }
  return b;
}

double auc(std::span<const double> scores, std::span<const float> labels) {
  COHORT_CHECK_EQ(scores.size(), labels.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // ties share their ranks
    for (size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        rank_sum += mean_rank;
      }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace cohort::examples::recommender
