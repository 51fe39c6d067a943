#include "cohort/privacy/prv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/privacy/fft_convolution.h"
#include "cohort/privacy/quadrature.h"
#include "cohort/privacy/rdp.h"

namespace cohort::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The largest grid the accountant builds (about 5 GB of working memory); a
// history that needs more gets an error that says what to relax.
constexpr int64_t kMaxGridSize = int64_t{1} << 27;

// An even number of points t_min + i dt, i < size, with everything composed
// into it moved right by `shift` (the mean corrections, added up).
struct Grid {
  double t_min = 0, t_max = 0;
  int64_t size = 0;
  double shift = 0;

  double dt() const { return (t_max - t_min) / (size - 1); }
  double at(int64_t i) const { return i == size - 1 ? t_max : t_min + i * dt(); }
  Grid shifted(double by) const { return {t_min + by, t_max + by, size, shift + by}; }
};

// [-L, L] on multiples of `mesh`, one point more when that count is odd.
Grid aligned_grid(double half_width, double mesh) {
  Grid grid;
  grid.t_min = std::floor(-half_width / mesh) * mesh;
  grid.t_max = std::ceil(half_width / mesh) * mesh;
  const double points = std::nearbyint((grid.t_max - grid.t_min) / mesh) + 1;
  COHORT_CHECK_AS(ConfigError, points <= kMaxGridSize)
      << "the PRV accountant would need a grid of " << points << " points (more than " << kMaxGridSize
      << "): raise eps_error or use the RDP accountant for this many steps";
  grid.size = static_cast<int64_t>(points);
  if (grid.size % 2 == 1) {
    ++grid.size;
    grid.t_max += mesh;
  }
  COHORT_CHECK_LT(std::fabs(grid.dt() - mesh) / mesh, 1e-8) << "grid misaligned";
  return grid;
}

// A probability mass function on a grid.
struct DiscreteLoss {
  std::vector<double> pmf;
  Grid grid;
};

// The loss of one step, truncated to [t_min, t_max] and renormalised.
class TruncatedLoss {
 public:
  TruncatedLoss(double q, double sigma, double t_min, double t_max)
      : q_(q), sigma_(sigma), t_min_(t_min), t_max_(t_max), cdf_min_(cdf(t_min)),
        mass_(cdf(t_max) - cdf_min_) {
    COHORT_CHECK_GT(mass_, 0) << "no privacy-loss mass in [" << t_min << ", " << t_max << "]";
  }

  double truncated_cdf(double t) const {
    if (t < t_min_) return 0;
    if (t >= t_max_) return 1;
    return (cdf(t) - cdf_min_) / mass_;
  }

  // E[Y] by parts, E[Y] = t_max - int_{t_min}^{t_max} F, panel by panel with
  // breaks at +-1e-5..1e-1, where the CDF climbs steepest for small q, and
  // at log(1 - q), where it starts: from there it can climb within a few
  // thousandths, which a panel that starts far below would step over.
  double mean() const {
    std::vector<double> points{t_min_, t_max_};
    for (double p = 1e-1; p >= 1e-5 * 0.99; p /= 10) points.insert(points.end(), {-p, p});
    if (const double start = std::log(1 - q_); start > t_min_ && start < t_max_) points.push_back(start);
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    auto f = [this](double t) { return truncated_cdf(t); };
    double mean = 0;
    for (size_t k = 0; k + 1 < points.size(); ++k) {
      const double left = points[k], right = points[k + 1];
      mean += right * truncated_cdf(right) - left * truncated_cdf(left) - integrate(f, left, right, 1e-14);
    }
    return mean;
  }

 private:
  double cdf(double t) const { return subsampled_gaussian_loss_cdf(q_, sigma_, t); }

  double q_, sigma_, t_min_, t_max_, cdf_min_, mass_;
};

// Each cell's probability at its centre, the grid then shifted by the
// difference of the true and the grid's means (so composition keeps the mean
// exact). Fails when that shift is half a cell or more: the grid cannot hold
// the distribution.
DiscreteLoss discretize(const TruncatedLoss& loss, const Grid& grid) {
  const double dt = grid.dt();
  std::vector<double> edge_cdf(grid.size + 1);
  for (int64_t i = 0; i < grid.size; ++i) edge_cdf[i] = loss.truncated_cdf(grid.at(i) - dt / 2);
  edge_cdf[grid.size] = loss.truncated_cdf(grid.at(grid.size - 1) + dt / 2);
  DiscreteLoss out{std::vector<double>(grid.size), grid};
  long double grid_mean = 0;
  for (int64_t i = 0; i < grid.size; ++i) {
    out.pmf[i] = edge_cdf[i + 1] - edge_cdf[i];
    grid_mean += static_cast<long double>(grid.at(i)) * out.pmf[i];
  }
  const double shift = loss.mean() - static_cast<double>(grid_mean);
  COHORT_CHECK_AS(ConfigError, std::fabs(shift) < dt / 2)
      << "the discretised privacy loss's mean is off by " << shift << ", half a grid cell is " << dt / 2
      << ": the PRV accountant cannot represent this mechanism (use the RDP accountant)";
  out.grid = grid.shifted(shift);
  return out;
}

// The k-fold composition of one segment: the support of the sum of k losses
// on the grid is k t_min + index dt; rolling by -(k-1) t_min / dt (mod size)
// puts it back on [t_min, t_max]. With t_min = -(size/2 - 1) dt that roll is
// k - 1, plus size/2 when k is even.
DiscreteLoss compose_self(const DiscreteLoss& one, int64_t k) {
  if (k == 1) return one;
  const std::vector<double> power = circular_convolution_power(one.pmf, k);
  const int64_t n = one.grid.size;
  int64_t roll = (k - 1) % n;
  if (k % 2 == 0) roll = (roll + n / 2) % n;
  DiscreteLoss out{std::vector<double>(n), one.grid.shifted(one.grid.shift * (k - 1))};
  for (int64_t i = 0; i < n; ++i) out.pmf[(i + roll) % n] = power[i];
  return out;
}

DiscreteLoss compose_two(const DiscreteLoss& left, const DiscreteLoss& right) {
  return {convolve_same(left.pmf, right.pmf), left.grid.shifted(right.grid.shift)};
}

// Neighbours pairwise until one is left (an odd one out waits a round).
DiscreteLoss compose_all(std::vector<DiscreteLoss> losses) {
  while (losses.size() > 1) {
    std::vector<DiscreteLoss> next;
    if (losses.size() % 2 == 1) {
      next.push_back(std::move(losses.back()));
      losses.pop_back();
    }
    for (size_t i = 0; i + 1 < losses.size(); i += 2) next.push_back(compose_two(losses[i], losses[i + 1]));
    losses = std::move(next);
  }
  return std::move(losses.front());
}

// delta(eps) = sum_{t_j > eps} p_j (1 - exp(eps - t_j)) of the grid, inverted:
// with the tail sums d1[i] = sum_{j>=i} p_j and d2[i] = sum_{j>=i} p_j
// exp(-t_j), delta(t_i) = d1[i] - exp(t_i) d2[i] falls with i; the first i
// where it is at most the target bounds eps, which is then exact:
// eps = log((d1[i] - target) / d2[i]).
class EpsilonOfDelta {
 public:
  explicit EpsilonOfDelta(const DiscreteLoss& loss) : d1_(loss.pmf.size()), d2_(loss.pmf.size()),
                                                      minus_delta_(loss.pmf.size()) {
    const int64_t n = loss.grid.size;
    double sum1 = 0, sum2 = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
      const double t = loss.grid.at(i);
      sum1 += loss.pmf[i];
      sum2 += loss.pmf[i] * std::exp(-t);
      d1_[i] = sum1;
      d2_[i] = sum2;
      minus_delta_[i] = std::exp(t) * sum2 - sum1;
    }
  }

  double operator()(double target) const {
    // A binary search as numpy.searchsorted(side="left"), the first i with
    // -delta(t_i) >= -target: the sequence is monotone only up to rounding.
    size_t lo = 0, hi = minus_delta_.size();
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (minus_delta_[mid] < -target)
        lo = mid + 1;
      else
        hi = mid;
    }
    COHORT_CHECK_AS(ConfigError, lo > 0 && lo < minus_delta_.size())
        << "cannot compute epsilon for delta " << target
        << ": the PRV grid does not reach it (use the RDP accountant)";
    return std::log((d1_[lo] - target) / d2_[lo]);
  }

 private:
  std::vector<double> d1_, d2_, minus_delta_;
};

}  // namespace

double subsampled_gaussian_loss_cdf(double q, double sigma, double t) {
  if (!(t > std::log(1 - q))) return 0;
  const double z = std::log((std::exp(t) + q - 1) / q);
  const double s2 = sigma * sigma, denominator = 2 * std::sqrt(2.0) * sigma;
  return -q * std::erfc((2 * z * s2 - 1) / denominator) / 2 - (1 - q) * std::erfc((2 * z * s2 + 1) / denominator) / 2 +
         1.0;
}

EpsilonBounds prv_epsilon(const History& history, double delta, const PrvOptions& options) {
  COHORT_CHECK_AS(ConfigError, delta > 0 && delta < 1) << "delta must be in (0, 1), got " << delta;
  COHORT_CHECK_AS(ConfigError, options.eps_error > 0) << "eps_error must be positive, got " << options.eps_error;
  const double delta_error = options.delta_error == 0 ? delta / 1000 : options.delta_error;
  COHORT_CHECK_AS(ConfigError, delta_error > 0 && delta_error < delta)
      << "delta_error must be in (0, delta), got " << delta_error;

  // Only segments that lose privacy take part; one that releases the data
  // unnoised loses all of it.
  History lossy;
  for (const Segment& s : history) {
    validate(s);
    if (s.steps == 0 || s.sample_rate == 0 || std::isinf(s.noise_multiplier)) continue;
    if (s.noise_multiplier == 0) return {kInf, kInf, kInf};
    lossy.push_back(s);
  }
  if (lossy.empty()) return {0, 0, 0};
  const int64_t steps = total_steps(lossy);

  // Where the composed loss lives: beyond L the RDP tail bounds leave less
  // than delta_error of mass (Gopi et al., Remark 5.6).
  double half_width = rdp_epsilon(lossy, delta_error / 4, opacus_rdp_orders()).epsilon;
  for (const Segment& s : lossy)
    half_width = std::max(half_width, rdp_epsilon({{s.noise_multiplier, s.sample_rate, 1}},
                                                  delta_error / (8.0 * steps), opacus_rdp_orders())
                                          .epsilon);
  half_width = std::max(half_width, options.eps_error) + 3;
  COHORT_CHECK_AS(ConfigError, std::isfinite(half_width))
      << "the RDP tail bound is infinite: no grid can hold this loss (use the RDP accountant)";
  const double mesh = options.eps_error / std::sqrt(steps * std::log(12 / delta_error) / 2);
  const Grid grid = aligned_grid(half_width, mesh);

  std::vector<DiscreteLoss> composed;
  for (const Segment& s : lossy) {
    const TruncatedLoss loss(s.sample_rate, s.noise_multiplier, grid.t_min, grid.t_max);
    composed.push_back(compose_self(discretize(loss, grid), s.steps));
  }
  const DiscreteLoss total = compose_all(std::move(composed));

  COHORT_CHECK_AS(ConfigError, std::numeric_limits<long double>::epsilon() * total.grid.size <= delta - delta_error)
      << "delta " << delta << " is too small for a PRV grid of " << total.grid.size
      << " points (float rounding would dominate): raise delta or eps_error";
  const EpsilonOfDelta epsilon_of(total);
  return {epsilon_of(delta + delta_error) - options.eps_error, epsilon_of(delta),
          epsilon_of(delta - delta_error) + options.eps_error};
}

}  // namespace cohort::privacy
