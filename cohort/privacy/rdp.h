// The RDP accountant: Rényi differential privacy of the Poisson-subsampled
// Gaussian mechanism, composed over a history by adding the curves, and
// converted to (epsilon, delta).
//
//   RDP of one step at order a: log(A_a) / (a - 1), A_a = E_{z~N(0,s^2)}
//   [((1-q) + q exp((2z-1)/(2s^2)))^a]: the binomial sum for integer a and the
//   two-sided erfc series for fractional a (Mironov, Talwar and Zhang 2019,
//   "Rényi Differential Privacy of the Sampled Gaussian Mechanism", Sec. 3.3).
//   RDP -> (epsilon, delta): epsilon = min_a rdp(a) + log1p(-1/a)
//   - log(delta a) / (a - 1) over the orders a > 1.01, or 0 where the KL bound
//   delta^2 >= 1 - exp(-rdp(a)) already holds (Canonne, Kamath and Steinke
//   2020, Prop. 12; Balle et al. 2020, Thm. 21): the conversion TF-Privacy's
//   dp_accounting and Opacus use since 2020.
//
// All float64. The result is an upper bound on the mechanism's epsilon (the
// minimum over a finite grid of orders).
#pragma once

#include <span>
#include <vector>

#include "cohort/privacy/history.h"

namespace cohort::privacy {

// The standard grid of orders, dp_accounting's DEFAULT_RDP_ORDERS:
// 1.1, 1.2, ..., 10.9, then 11, 12, ..., 63, then 128, 256, 512, 1024.
std::span<const double> default_rdp_orders();

// Opacus's RDPAccountant.DEFAULT_ALPHAS: 1.1, ..., 10.9, then 12, ..., 63.
std::span<const double> opacus_rdp_orders();

// How the fractional-order series of A_a is summed. Its binomial
// coefficients alternate in sign past the order: `exact` keeps the signs
// (the series' value, as Opacus and TF-Privacy's rdp_accountant until 2022;
// checked against a numerical integral in the tests); `absolute` adds
// their magnitudes, an upper bound a few percent looser at orders below 3,
// which is what dp_accounting (and so TF-Privacy at HEAD) computes. Both
// are valid bounds; `absolute` exists to reproduce dp_accounting's numbers.
enum class FractionalSeries { exact, absolute };

// RDP at `order` (>= 1, may be +inf) of one step. 0 when sample_rate is 0;
// +inf at order 1 (the KL divergence, which the conversion does not use);
// +inf when noise_multiplier is 0 or order is +inf (and sample_rate > 0);
// order / (2 sigma^2) when sample_rate is 1. For fractional orders the series
// is summed until its terms fall 30 nats below the total; one that has not
// converged in 1000 terms gives +inf (that order is then never the minimum).
double rdp_subsampled_gaussian(double sample_rate, double noise_multiplier, double order,
                               FractionalSeries series = FractionalSeries::exact);

// The RDP curve of a history at `orders`: the sum over segments of
// steps * rdp_subsampled_gaussian(q, sigma, order).
std::vector<double> rdp_curve(const History& history, std::span<const double> orders,
                              FractionalSeries series = FractionalSeries::exact);

struct RdpEpsilon {
  double epsilon;  // +inf when no order gives a finite bound
  double order;    // the order that attains it
};

// (epsilon, delta) from an RDP curve: the smallest epsilon over `orders` for
// `delta` (in (0, 1); delta 0 gives 0 for a zero curve, +inf otherwise).
RdpEpsilon rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp, double delta);

struct RdpDelta {
  double delta;
  double order;
};

// The inverse: the smallest delta over `orders` for `epsilon` >= 0.
RdpDelta rdp_to_delta(std::span<const double> orders, std::span<const double> rdp, double epsilon);

// epsilon spent by `history` at `delta`.
RdpEpsilon rdp_epsilon(const History& history, double delta,
                       std::span<const double> orders = default_rdp_orders(),
                       FractionalSeries series = FractionalSeries::exact);

}  // namespace cohort::privacy
