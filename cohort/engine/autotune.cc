#include "cohort/engine/autotune.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <functional>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/stats.h"

namespace cohort::engine {
namespace {

void insert_sorted(std::vector<int64_t>& grid, int64_t v) {
  if (std::find(grid.begin(), grid.end(), v) == grid.end()) grid.push_back(v);
  std::sort(grid.begin(), grid.end());
}

size_t index_of(const std::vector<int64_t>& grid, int64_t v) {
  return size_t(std::find(grid.begin(), grid.end(), v) - grid.begin());
}

}  // namespace

std::vector<int64_t> default_bucket_grid() {
  return {int64_t(1) << 20, int64_t(4) << 20, int64_t(16) << 20, int64_t(64) << 20, int64_t(256) << 20};
}

Autotuner::Autotuner(AutotuneParams start, AutotuneOptions options) : o_(std::move(options)), start_(start) {
  COHORT_CHECK_AS(ConfigError, start.fusion_threshold_bytes >= 0 && start.cycle_time_us >= 0 &&
                                    start.bucket_bytes >= 0)
      << "autotune: negative start parameters";
  COHORT_CHECK_AS(ConfigError, o_.steps_per_sample >= 1 && o_.warmup_steps >= 0 && o_.settle_steps >= 0)
      << "autotune: steps_per_sample must be positive, warm-up and settle steps non-negative";
  for (int64_t v : o_.fusion_thresholds) COHORT_CHECK_AS(ConfigError, v >= 0) << "autotune: negative threshold " << v;
  for (int64_t v : o_.cycle_times_us) COHORT_CHECK_AS(ConfigError, v >= 0) << "autotune: negative cycle time " << v;
  for (int64_t v : o_.bucket_bytes)
    COHORT_CHECK_AS(ConfigError, v > 0) << "autotune: bucket cap " << v << " is not positive";
  COHORT_CHECK_AS(ConfigError, o_.bucket_bytes.empty() || start.bucket_bytes > 0)
      << "autotune: bucket caps to try but no start cap";
  insert_sorted(o_.fusion_thresholds, start.fusion_threshold_bytes);
  insert_sorted(o_.cycle_times_us, start.cycle_time_us);
  insert_sorted(o_.bucket_bytes, start.bucket_bytes);
  start_point_ = {index_of(o_.fusion_thresholds, start.fusion_threshold_bytes),
                  index_of(o_.cycle_times_us, start.cycle_time_us), index_of(o_.bucket_bytes, start.bucket_bytes)};
  point_ = best_ = start_point_;
  current_ = start_;
  skip_ = o_.warmup_steps;
}

AutotuneParams Autotuner::params(const Point& p) const {
  return {o_.fusion_thresholds[p.i], o_.cycle_times_us[p.j], o_.bucket_bytes[p.k]};
}

int Autotuner::samples_of(const Point& p) const {
  return int(std::count_if(results_.begin(), results_.end(), [&](const auto& r) { return r.first == p; }));
}

std::optional<double> Autotuner::score(const Point& p) const {
  double sum = 0;
  int n = 0;
  for (const auto& [q, s] : results_)
    if (q == p) {
      sum += s;
      ++n;
    }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::optional<Autotuner::Point> Autotuner::propose() {
  return o_.method == AutotuneMethod::bayesian ? propose_bayesian() : propose_coordinate();
}

// Replays the whole search over the samples so far (the first sample of
// each point, so that later samples cannot change its path) and returns the
// first point it lacks.
std::optional<Autotuner::Point> Autotuner::propose_coordinate() {
  auto first = [&](const Point& p) -> std::optional<double> {
    for (const auto& [q, s] : results_)
      if (q == p) return s;
    return std::nullopt;
  };
  // One coordinate, coarse to fine: both ends, the middle and the start,
  // then from the best of them to better neighbours until none is better.
  // `best` gets the winner.
  auto search = [&](size_t n, size_t start, auto at, size_t& best) -> std::optional<Point> {
    double best_value = std::numeric_limits<double>::infinity();
    auto consider = [&](size_t k) -> std::optional<Point> {
      const auto f = first(at(k));
      if (!f) return at(k);
      if (*f < best_value) {
        best_value = *f;
        best = k;
      }
      return std::nullopt;
    };
    for (size_t k : {start, size_t(0), (n - 1) / 2, n - 1})
      if (auto need = consider(k)) return need;
    for (size_t centre = n; centre != best;) {
      centre = best;
      if (centre > 0)
        if (auto need = consider(centre - 1)) return need;
      if (centre + 1 < n)
        if (auto need = consider(centre + 1)) return need;
    }
    return std::nullopt;
  };
  if (!first(start_point_)) return start_point_;
  const Point s = start_point_;
  size_t bi = s.i, bj = s.j, bk = s.k;
  if (auto need = search(o_.bucket_bytes.size(), s.k, [&](size_t k) { return Point{s.i, s.j, k}; }, bk)) return need;
  if (auto need = search(o_.fusion_thresholds.size(), s.i, [&](size_t i) { return Point{i, s.j, bk}; }, bi))
    return need;
  if (auto need = search(o_.cycle_times_us.size(), s.j, [&](size_t j) { return Point{bi, j, bk}; }, bj)) return need;
  const Point winner{bi, bj, bk};
  // A second sample of the winner and of the baseline; the better mean wins.
  if (!(winner == start_point_)) {
    if (samples_of(winner) < 2) return winner;
    if (samples_of(start_point_) < 2) return start_point_;
  }
  best_ = *score(winner) <= *score(start_point_) ? winner : start_point_;
  return std::nullopt;
}

// Gaussian-process expected improvement over the grid (Horovod's method, for
// comparison): fixed RBF kernel on the grid's normalised log-index
// coordinates, scores standardised; the baseline and two seeded random
// points first; the best mean observed at the end of the budget.
std::optional<Autotuner::Point> Autotuner::propose_bayesian() {
  const size_t ni = o_.fusion_thresholds.size(), nj = o_.cycle_times_us.size(), nk = o_.bucket_bytes.size();
  std::vector<Point> seen;
  std::vector<double> y;
  for (const auto& [p, s] : results_)
    if (std::find(seen.begin(), seen.end(), p) == seen.end()) {
      seen.push_back(p);
      y.push_back(*score(p));
    }
  if (int(results_.size()) >= o_.max_samples || seen.size() == ni * nj * nk) {
    best_ = *std::min_element(seen.begin(), seen.end(), [&](const Point& a, const Point& b) { return *score(a) < *score(b); });
    return std::nullopt;
  }
  if (seen.empty()) return start_point_;
  if (seen.size() < 3) {
    uint64_t state = o_.seed * 6364136223846793005ull + 1442695040888963407ull + results_.size();
    for (int tries = 0; tries < 64; ++tries) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const Point p{size_t((state >> 33) % ni), size_t((state >> 17) % nj), size_t((state >> 49) % nk)};
      if (std::find(seen.begin(), seen.end(), p) == seen.end()) return p;
    }
  }
  auto unit = [](size_t v, size_t n) { return n > 1 ? double(v) / double(n - 1) : 0.0; };
  auto coord = [&](const Point& p) { return std::array<double, 3>{unit(p.i, ni), unit(p.j, nj), unit(p.k, nk)}; };
  constexpr double kLength = 0.35, kNoise = 0.05;
  auto kernel = [&](const Point& a, const Point& b) {
    const auto ca = coord(a), cb = coord(b);
    double d2 = 0;
    for (size_t d = 0; d < ca.size(); ++d) d2 += (ca[d] - cb[d]) * (ca[d] - cb[d]);
    return std::exp(-0.5 * d2 / (kLength * kLength));
  };
  const size_t n = seen.size();
  double mean = 0, var = 0;
  for (double v : y) mean += v / double(n);
  for (double v : y) var += (v - mean) * (v - mean) / double(n);
  const double sd = var > 0 ? std::sqrt(var) : 1;
  std::vector<double> z(n);
  for (size_t k = 0; k < n; ++k) z[k] = (y[k] - mean) / sd;
  // Cholesky of K + noise I.
  std::vector<double> L(n * n, 0);
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c <= r; ++c) {
      double s = kernel(seen[r], seen[c]) + (r == c ? kNoise : 0);
      for (size_t k = 0; k < c; ++k) s -= L[r * n + k] * L[c * n + k];
      L[r * n + c] = r == c ? std::sqrt(std::max(s, 1e-12)) : s / L[c * n + c];
    }
  auto solve_lower = [&](std::vector<double> b) {
    for (size_t r = 0; r < n; ++r) {
      for (size_t k = 0; k < r; ++k) b[r] -= L[r * n + k] * b[k];
      b[r] /= L[r * n + r];
    }
    return b;
  };
  const std::vector<double> w = solve_lower(z);  // L^-1 z
  const double best_z = *std::min_element(z.begin(), z.end());
  double best_ei = -1;
  Point choice = seen.front();
  for (size_t i = 0; i < ni; ++i)
    for (size_t j = 0; j < nj; ++j)
      for (size_t b = 0; b < nk; ++b) {
        const Point p{i, j, b};
        if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
        std::vector<double> k(n);
        for (size_t r = 0; r < n; ++r) k[r] = kernel(p, seen[r]);
        const std::vector<double> v = solve_lower(k);  // L^-1 k
        double mu = 0, reduction = 0;
        for (size_t r = 0; r < n; ++r) {
          mu += v[r] * w[r];
          reduction += v[r] * v[r];
        }
        const double sigma = std::sqrt(std::max(1e-12, 1 + kNoise - reduction));
        const double gain = best_z - mu - 0.01;
        const double u = gain / sigma;
        const double ei = gain * 0.5 * std::erfc(-u / std::sqrt(2.0)) +
                          sigma * std::exp(-0.5 * u * u) / std::sqrt(2 * std::numbers::pi);
        if (ei > best_ei) {
          best_ei = ei;
          choice = p;
        }
      }
  return choice;
}

void Autotuner::begin_sample(const Point& p) {
  if (!(p == point_)) skip_ = o_.settle_steps;
  point_ = p;
  current_ = params(p);
}

void Autotuner::stop() {
  if (converged_) return;
  converged_ = true;
  converged_at_ = steps_;
  point_ = best_ = start_point_;
  current_ = start_;
}

bool Autotuner::on_step(double seconds) {
  ++steps_;
  if (converged_) return false;
  if (skip_ > 0) {
    --skip_;
    return false;
  }
  window_.push_back(seconds);
  if (int(window_.size()) < o_.steps_per_sample) return false;
  const double s = median(window_);
  window_.clear();
  results_.emplace_back(point_, s);
  trials_.push_back({params(point_), s, steps_});
  const AutotuneParams before = current_;
  if (const auto next = propose()) {
    begin_sample(*next);
  } else {
    converged_ = true;
    converged_at_ = steps_;
    point_ = best_;
    current_ = params(best_);
  }
  return !(current_ == before);
}

uint64_t op_identity(const std::string& name) { return std::hash<std::string>{}(name) * 2; }
uint64_t op_identity(uint64_t signature, uint64_t count) {
  return ((signature * 0x9e3779b97f4a7c15ull) ^ count) * 2 + 1;  // odd: never a name's
}

std::string autotune_csv(const Autotuner& tuner) {
  std::ostringstream os;
  os << "step,fusion_threshold_bytes,cycle_time_us,seconds_per_step,bucket_bytes\n";
  for (const AutotuneTrial& t : tuner.trials())
    os << t.step << "," << t.params.fusion_threshold_bytes << "," << t.params.cycle_time_us << ","
       << t.seconds_per_step << "," << t.params.bucket_bytes << "\n";
  return os.str();
}

}  // namespace cohort::engine
