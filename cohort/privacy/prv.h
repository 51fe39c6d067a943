// The PRV accountant: numerical composition of privacy loss random variables
// (Gopi, Lee and Wutschitz 2021, "Numerical Composition of Differential
// Privacy"), the method of Opacus's PRVAccountant and of Microsoft's
// prv_accountant; Google's dp_accounting PLD accountant composes the same
// privacy-loss distributions on a grid.
//
//   1. Each segment's privacy loss Y = log(mu1(X)/mu0(X)) of the
//      Poisson-subsampled Gaussian has a closed-form CDF; truncate it to
//      [-L, L] and put its mass on a grid of mesh h (each cell's probability
//      at the cell's centre), shifted so the grid's mean is the true mean.
//   2. Compose: the k-fold self-convolution of a segment by one FFT (the
//      spectrum to the k-th power), different segments by linear
//      convolution.
//   3. delta(eps) = E[(1 - exp(eps - Y))+] of the composed grid, inverted
//      exactly between grid points.
//
// Error bound (Gopi et al., Thm. 5.5 and Remark 5.6, the choices Opacus
// makes): with L from the RDP tail bounds at delta_error / 4 for the whole
// history and delta_error / (8 T) for one step (T steps in all), plus 3, and
// h = eps_error / sqrt(T log(12 / delta_error) / 2), the true epsilon at
// delta lies in [lower, upper] where lower = eps(delta + delta_error) -
// eps_error and upper = eps(delta - delta_error) + eps_error (eps() the
// grid's). `upper` is the guarantee to report. Defaults: eps_error 0.01,
// delta_error delta / 1000, as Opacus.
#pragma once

#include "cohort/privacy/history.h"

namespace cohort::privacy {

struct PrvOptions {
  double eps_error = 0.01;   // > 0
  double delta_error = 0;    // 0: delta / 1000; else in (0, delta)
};

struct EpsilonBounds {
  double lower;
  double estimate;
  double upper;
};

// epsilon spent by `history` at `delta` in (0, 1). A history without privacy
// loss (no steps, or every segment with sample rate 0) gives {0, 0, 0};
// a segment with noise multiplier 0 and sample rate > 0 gives +inf. Throws
// ConfigError for arguments out of range, when float64 cannot resolve delta
// on the grid (delta below about 1e-19 times the grid size), and when the
// grid cannot hold the loss (the references' "Cannot compute epsilon"); the
// message then suggests the RDP accountant.
EpsilonBounds prv_epsilon(const History& history, double delta, const PrvOptions& options = {});

// The CDF of the privacy loss of one Poisson-subsampled Gaussian step at t:
// P[Y <= t] = 1 - q/2 erfc((2 z s^2 - 1) / (2 sqrt(2) s)) - (1-q)/2
// erfc((2 z s^2 + 1) / (2 sqrt(2) s)), z = log((e^t + q - 1) / q), for
// t > log(1 - q), and 0 below (Gopi et al., Prop. B.4).
double subsampled_gaussian_loss_cdf(double sample_rate, double noise_multiplier, double t);

}  // namespace cohort::privacy
