#include "cohort/privacy/rdp.h"

#include <cmath>
#include <limits>

#include "cohort/common/check.h"
#include "cohort/privacy/log_space.h"

namespace cohort::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> make_orders(int first_integer, bool powers_of_two) {
  std::vector<double> orders;
  // 1 + x / 10.0 exactly as the references compute it, so that an order
  // such as 1.3 is the same double here and there.
  for (int x = 1; x < 100; ++x) orders.push_back(1 + x / 10.0);
  for (int a = first_integer; a < 64; ++a) orders.push_back(a);
  if (powers_of_two)
    for (double a : {128.0, 256.0, 512.0, 1024.0}) orders.push_back(a);
  return orders;
}

// log(A_a) for integer a: sum_i binom(a, i) (1-q)^(a-i) q^i exp((i^2 - i)/(2 s^2)).
double log_a_integer(double q, double sigma, int64_t alpha) {
  double log_a = -kInf;
  const double log_q = std::log(q), log_1mq = std::log1p(-q);
  for (int64_t i = 0; i <= alpha; ++i) {
    const double term = log_binomial(alpha, i).log_abs + i * log_q + (alpha - i) * log_1mq +
                        (double(i) * i - i) / (2 * sigma * sigma);
    log_a = log_add(log_a, term);
  }
  return log_a;
}

// log(A_a) for fractional a: A_a split at z0, where q exp((2z-1)/(2s^2))
// equals 1 - q; below z0 the binomial series of ((1-q) + q x)^a converges in
// powers of q x / (1-q), above it in powers of (1-q) / (q x). Each term
// integrates in closed form against the Gaussian, giving an erfc.
double log_a_fractional(double q, double sigma, double alpha, FractionalSeries series) {
  double log_a0 = -kInf, log_a1 = -kInf;  // the sums below and above z0, as signed logs
  int sign_a0 = 1, sign_a1 = 1;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  const double log_q = std::log(q), log_1mq = std::log1p(-q);
  const double two_sigma2 = 2 * sigma * sigma, sqrt2_sigma = std::sqrt(2.0) * sigma;
  // Adds sign * exp(term) to the signed log (value, sign).
  auto accumulate = [](double& value, int& sign, double term, int term_sign) {
    if (term == -kInf) return;
    if (value == -kInf || sign == term_sign) {
      if (value == -kInf) sign = term_sign;
      value = log_add(value, term);
    } else if (value >= term) {
      value = log_sub(value, term);
    } else {
      value = log_sub(term, value);
      sign = term_sign;
    }
  };
  double last_s0 = -kInf, last_s1 = -kInf;
  for (int i = 0; i < 1000; ++i) {
    const SignedLog coef = log_binomial(alpha, i);
    const double j = alpha - i;
    const double log_t0 = coef.log_abs + i * log_q + j * log_1mq;
    const double log_t1 = coef.log_abs + j * log_q + i * log_1mq;
    const double log_e0 = std::log(0.5) + log_erfc((i - z0) / sqrt2_sigma);
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / sqrt2_sigma);
    const double log_s0 = log_t0 + (double(i) * i - i) / two_sigma2 + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / two_sigma2 + log_e1;
    const int term_sign = series == FractionalSeries::exact ? coef.sign : 1;
    accumulate(log_a0, sign_a0, log_s0, term_sign);
    accumulate(log_a1, sign_a1, log_s1, term_sign);
    // The terms decrease once i passes the peak of the binomial weights:
    // stop when both fall and both are 30 nats (1e-13) below the total.
    const double total = log_add(log_a0, log_a1);
    if (log_s0 < last_s0 && log_s1 < last_s1 && std::max(log_s0, log_s1) < total - 30) {
      COHORT_CHECK(sign_a0 > 0 && sign_a1 > 0) << "A_alpha series went negative";
      return total;
    }
    last_s0 = log_s0;
    last_s1 = log_s1;
  }
  return kInf;  // not converged: this order gives no bound
}

void check_delta(double delta) {
  COHORT_CHECK_AS(ConfigError, delta >= 0 && delta < 1) << "delta must be in [0, 1), got " << delta;
}

void check_curve(std::span<const double> orders, std::span<const double> rdp) {
  COHORT_CHECK_EQ_AS(ConfigError, orders.size(), rdp.size()) << "one RDP value per order";
  COHORT_CHECK_AS(ConfigError, !orders.empty()) << "no RDP orders";
  for (double a : orders) COHORT_CHECK_AS(ConfigError, a >= 1) << "RDP orders must be >= 1, got " << a;
}

}  // namespace

std::span<const double> default_rdp_orders() {
  static const std::vector<double> orders = make_orders(11, true);
  return orders;
}

std::span<const double> opacus_rdp_orders() {
  static const std::vector<double> orders = make_orders(12, false);
  return orders;
}

double rdp_subsampled_gaussian(double q, double sigma, double order, FractionalSeries series) {
  validate(Segment{sigma, q, 1});
  COHORT_CHECK_AS(ConfigError, order >= 1) << "RDP order must be >= 1, got " << order;
  if (q == 0) return 0;
  if (std::isinf(order) || sigma == 0) return kInf;
  if (q == 1) return order / (2 * sigma * sigma);
  // Order 1 (the KL divergence) is not computed: +inf, never the bound.
  if (order == 1) return kInf;
  const double log_a = order == std::floor(order) ? log_a_integer(q, sigma, static_cast<int64_t>(order))
                                                   : log_a_fractional(q, sigma, order, series);
  return log_a / (order - 1);
}

std::vector<double> rdp_curve(const History& history, std::span<const double> orders, FractionalSeries series) {
  std::vector<double> curve(orders.size(), 0.0);
  for (const Segment& s : history) {
    validate(s);
    if (s.steps == 0) continue;
    for (size_t k = 0; k < orders.size(); ++k)
      curve[k] += s.steps * rdp_subsampled_gaussian(s.sample_rate, s.noise_multiplier, orders[k], series);
  }
  return curve;
}

RdpEpsilon rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp, double delta) {
  check_curve(orders, rdp);
  check_delta(delta);
  if (delta == 0) {
    for (double r : rdp)
      if (r != 0) return {kInf, orders[0]};
    return {0, orders[0]};
  }
  RdpEpsilon best{kInf, orders[0]};
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k], r = rdp[k];
    double epsilon;
    if (r < 0) {
      epsilon = 0;  // only from rounding at extreme parameters
    } else if (delta * delta + std::expm1(-r) > 0) {
      epsilon = 0;  // delta <= sqrt(1 - exp(-KL)) already holds
    } else if (a > 1.01) {
      // Unstable as a -> 1, and never the minimum there.
      epsilon = r + std::log1p(-1 / a) - std::log(delta * a) / (a - 1);
    } else {
      epsilon = kInf;
    }
    if (epsilon < best.epsilon) best = {epsilon, a};
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

RdpDelta rdp_to_delta(std::span<const double> orders, std::span<const double> rdp, double epsilon) {
  check_curve(orders, rdp);
  COHORT_CHECK_AS(ConfigError, epsilon >= 0) << "epsilon must be non-negative, got " << epsilon;
  double best_log_delta = kInf, best_order = orders[0];
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k], r = rdp[k];
    // The KL bound delta <= sqrt(1 - exp(-r)), then the order-a bound.
    double log_delta = r <= 0 ? -kInf : 0.5 * std::log1p(-std::exp(-r));
    if (a > 1.01) log_delta = std::min(log_delta, (a - 1) * (r - epsilon + std::log1p(-1 / a)) - std::log(a));
    if (log_delta < best_log_delta) {
      best_log_delta = log_delta;
      best_order = a;
    }
  }
  return {std::min(std::exp(best_log_delta), 1.0), best_order};
}

RdpEpsilon rdp_epsilon(const History& history, double delta, std::span<const double> orders,
                       FractionalSeries series) {
  return rdp_to_epsilon(orders, rdp_curve(history, orders, series), delta);
}

}  // namespace cohort::privacy
