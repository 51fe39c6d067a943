// The RDP accountant against the published test tables of TF-Privacy,
// dp_accounting and Opacus (each case names its source), against an
// independent numerical integral of A_alpha, and its properties.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/privacy/rdp.h"

namespace cohort::privacy::rdp_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// absltest / unittest assertAlmostEqual(a, b, places): round(a - b, places) == 0.
void expect_almost_equal(double actual, double expected, int places = 7) {
  EXPECT_LT(std::fabs(actual - expected), 0.5 * std::pow(10.0, -places))
      << "actual " << actual << " expected " << expected << " to " << places << " places";
}

// tensorflow/privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_lib.py,
// compute_dp_sgd_privacy: q = batch / n, steps = ceil(epochs n / batch), these orders.
std::vector<double> tf_privacy_orders() {
  std::vector<double> orders{1.25, 1.5, 1.75, 2., 2.25, 2.5, 3., 3.5, 4., 4.5};
  for (int a = 5; a < 64; ++a) orders.push_back(a);
  for (double a : {128.0, 256.0, 512.0}) orders.push_back(a);
  return orders;
}

struct DpSgdCase {
  double n, batch, sigma, epochs, delta, epsilon, order;
};

RdpEpsilon compute_dp_sgd_privacy(const DpSgdCase& c) {
  const double q = c.batch / c.n;
  const auto steps = static_cast<int64_t>(std::ceil(c.epochs * c.n / c.batch));
  return rdp_epsilon({{c.sigma, q, steps}}, c.delta, tf_privacy_orders());
}

// tensorflow/privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py,
// ComputeDpSgdPrivacyTest.test_compute_dp_sgd_privacy Test0 and Test1 (assertAlmostEqual: 7 places).
TEST(RdpReference, TfPrivacyComputeDpSgdPrivacy) {
  for (const DpSgdCase& c : {DpSgdCase{60000, 150, 1.3, 15, 1e-5, 0.7242234026109595, 19.0},
                             DpSgdCase{100000, 100, 1.0, 30, 1e-7, 1.4154988495444842, 13.0}}) {
    const RdpEpsilon got = compute_dp_sgd_privacy(c);
    expect_almost_equal(got.epsilon, c.epsilon);
    EXPECT_EQ(got.order, c.order);
  }
}

// The same test's Test2 (sigma 0.1, 976563 steps, epsilon about 5.9e6, optimal
// order 1.25): TF-Privacy at HEAD computes through dp_accounting, whose
// fractional-order series adds the magnitudes of its terms
// (FractionalSeries::absolute); that reproduces HEAD's value to every digit.
// (TF-Privacy's 2021 table, 5907982.31138195, came from the exact series; we
// give 5907982.3113822, 2e-7 off, below the float64 rounding of a sum of
// this size, so that older value is not asserted to 7 places.)
TEST(RdpReference, TfPrivacyComputeDpSgdPrivacyExtremeNoise) {
  const double q = 1024 / 1e8;
  const auto steps = static_cast<int64_t>(std::ceil(10 * 1e8 / 1024));
  const RdpEpsilon got = rdp_epsilon({{0.1, q, steps}}, 1e-7, tf_privacy_orders(), FractionalSeries::absolute);
  expect_almost_equal(got.epsilon, 5907982.3113978775);
  EXPECT_EQ(got.order, 1.25);
  const RdpEpsilon exact = rdp_epsilon({{0.1, q, steps}}, 1e-7, tf_privacy_orders());
  EXPECT_NEAR(exact.epsilon, 5907982.31138195, 1e-6);
  EXPECT_LT(exact.epsilon, got.epsilon);
}

// tensorflow/privacy, compute_dp_sgd_privacy_test.py,
// test_compute_dp_sgd_example_privacy, the RDP rows (epochs 1.2, sigma 0.7,
// delta 1e-5; microbatching halves sigma; Poisson q = 1e-2 gives
// ceil(1.2 / q) steps, none gives ceil(1.2) unsampled releases), computed
// with dp_accounting's default orders. The sampled rows' optimum is a
// fractional order, where dp_accounting sums absolute terms.
TEST(RdpReference, TfPrivacyExamplePrivacy) {
  expect_almost_equal(rdp_epsilon({{0.7, 1.0, 2}}, 1e-5).epsilon, 10.8602036);
  expect_almost_equal(rdp_epsilon({{0.35, 1.0, 2}}, 1e-5).epsilon, 26.2880374);
  const auto absolute = FractionalSeries::absolute;
  expect_almost_equal(rdp_epsilon({{0.7, 1e-2, 120}}, 1e-5, default_rdp_orders(), absolute).epsilon, 3.2392676);
  expect_almost_equal(rdp_epsilon({{0.35, 1e-2, 120}}, 1e-5, default_rdp_orders(), absolute).epsilon, 22.6248601);
  // The exact series is tighter, never looser.
  EXPECT_LT(rdp_epsilon({{0.7, 1e-2, 120}}, 1e-5).epsilon, 3.2392676);
}

// tensorflow/privacy, compute_dp_sgd_privacy_test.py,
// test_dp_sgd_privacy_statement_no_user_dp_with_rdp: n 10000, batch 64, 5
// epochs, sigma 2.0 with microbatching (1.0), delta 1e-6, printed as %.3f.
TEST(RdpReference, TfPrivacyStatementExampleLevel) {
  const int64_t poisson_steps = static_cast<int64_t>(std::ceil(5.0 / (64.0 / 10000)));
  EXPECT_EQ(poisson_steps, 782);
  expect_almost_equal(rdp_epsilon({{1.0, 1.0, 5}}, 1e-6).epsilon, 13.376, 3);
  expect_almost_equal(rdp_epsilon({{1.0, 64.0 / 10000, poisson_steps}}, 1e-6).epsilon, 1.616, 3);
}

// pytorch/opacus, opacus/tests/accountants_test.py,
// AccountingTest.test_rdp_accountant: sigma 1.5, q 0.04, int(90 / 0.04) =
// 2250 steps, delta 1e-5, Opacus's orders, assertAlmostEqual (7 places).
TEST(RdpReference, OpacusRdpAccountant) {
  expect_almost_equal(rdp_epsilon({{1.5, 0.04, 2250}}, 1e-5, opacus_rdp_orders()).epsilon, 7.32911117143);
  // dp_accounting's grid is a superset; the optimum is the same order.
  expect_almost_equal(rdp_epsilon({{1.5, 0.04, 2250}}, 1e-5).epsilon, 7.32911117143);
}

// google/differential-privacy, python/dp_accounting/dp_accounting/rdp/
// rdp_privacy_accountant_test.py, test_compute_rdp_poisson_sampled_gaussian
// (np.allclose, rtol 1e-4; dp_accounting's absolute-term series).
TEST(RdpReference, DpAccountingPoissonSampledGaussianCurve) {
  const std::vector<double> orders{1.5, 2.5, 5, 50, 100, kInf};
  const std::vector<double> expected{6.70579741e-04, 1.08548710e-03, 2.18075656e-03,
                                     2.38460375e-02, 1.67416308e02,  kInf};
  const std::vector<double> got = rdp_curve({{2.5, 0.01, 50}}, orders, FractionalSeries::absolute);
  for (size_t k = 0; k < orders.size(); ++k) {
    if (std::isinf(expected[k])) {
      EXPECT_EQ(got[k], kInf);
      continue;
    }
    EXPECT_NEAR(got[k], expected[k], 1e-4 * expected[k]) << "order " << orders[k];
  }
}

// The same curve in tensorflow/privacy, tensorflow_privacy/privacy/analysis/
// rdp_accountant_test.py, test_compute_rdp_sequence (assertSequenceAlmostEqual,
// delta 1e-5), from the exact series TF-Privacy summed then.
TEST(RdpReference, TfPrivacyRdpSequence) {
  const std::vector<double> orders{1.5, 2.5, 5, 50, 100};
  const std::vector<double> expected{0.00065, 0.001085, 0.00218075, 0.023846, 167.416307};
  const std::vector<double> got = rdp_curve({{2.5, 0.01, 50}}, orders);
  for (size_t k = 0; k < orders.size(); ++k) EXPECT_NEAR(got[k], expected[k], 1e-5) << "order " << orders[k];
}

// tensorflow/privacy, rdp_accountant_test.py, test_compute_rdp_scalar
// (q 0.1, sigma 2, 10 steps, order 5: 0.07737 to 5 places), and
// test_compute_rdp_no_data / no_sampling.
TEST(RdpReference, TfPrivacyScalarCases) {
  expect_almost_equal(rdp_curve({{2, 0.1, 10}}, std::vector<double>{5})[0], 0.07737, 5);
  EXPECT_EQ(rdp_subsampled_gaussian(0, 10, 20), 0);
  EXPECT_EQ(rdp_subsampled_gaussian(1, 10, 20), 0.1);
}

// google/differential-privacy, rdp_privacy_accountant_test.py,
// test_compute_epsilon_delta_pure_dp: a constant curve 1.1 on orders
// 2..32 is pure DP; at delta 1e-5 the largest order wins.
TEST(RdpReference, DpAccountingPureDpConversion) {
  std::vector<double> orders, rdp;
  for (int a = 2; a <= 32; ++a) {
    orders.push_back(a);
    rdp.push_back(1.1);
  }
  const RdpEpsilon e = rdp_to_epsilon(orders, rdp, 1e-5);
  expect_almost_equal(e.epsilon, 1.32783806176);
  EXPECT_EQ(e.order, 32);
  const RdpDelta d = rdp_to_delta(orders, rdp, 1.32783806176);
  expect_almost_equal(d.delta, 1e-5);
  EXPECT_EQ(d.order, 32);
}

// google/differential-privacy, rdp_privacy_accountant_test.py,
// test_compute_epsilon_delta_gaussian: sigma 4.530877117 is exactly
// (1, 1e-6)-DP for the Gaussian mechanism; on orders 1.000..99.999 the RDP
// conversion recovers epsilon 1 and delta 1e-6 to 7 places.
TEST(RdpReference, DpAccountingCalibratedGaussian) {
  std::vector<double> orders;
  for (int i = 1000; i < 100000; ++i) orders.push_back(0.001 * i);
  std::vector<double> rdp;
  for (double a : orders) rdp.push_back(rdp_subsampled_gaussian(1, 4.530877117, a));
  expect_almost_equal(rdp_to_epsilon(orders, rdp, 1e-6).epsilon, 1);
  expect_almost_equal(rdp_to_delta(orders, rdp, 1).delta, 1e-6);
}

// google/differential-privacy, rdp_privacy_accountant_test.py,
// test_epsilon_delta_consistency: epsilon -> delta -> epsilon round trips.
TEST(RdpConversion, EpsilonDeltaConsistency) {
  std::vector<double> orders;
  for (int a = 2; a < 50; ++a) orders.push_back(a);
  for (double q : {0.0, 0.01, 0.1, 0.8, 1.0})
    for (double sigma : {0.0, 0.1, 1.0, 10.0, 100.0}) {
      const std::vector<double> rdp = rdp_curve({{sigma, q, 1}}, orders);
      for (double delta : {.99, .9, .1, .01, 1e-3, 1e-5, 1e-9, 1e-12}) {
        const double epsilon = rdp_to_epsilon(orders, rdp, delta).epsilon;
        const double delta2 = rdp_to_delta(orders, rdp, std::isinf(epsilon) ? 1e300 : epsilon).delta;
        SCOPED_TRACE(testing::Message() << "q " << q << " sigma " << sigma << " delta " << delta);
        if (std::isinf(epsilon))
          EXPECT_EQ(rdp_to_delta(orders, rdp, 0).delta, 1.0);
        else if (epsilon == 0)
          EXPECT_LE(delta2, delta);
        else
          expect_almost_equal(delta2, delta);
      }
    }
}

// The exact (epsilon, delta) curve of the Gaussian mechanism (Balle and
// Wang 2018, Thm. 8) lower-bounds the RDP conversion, and the classical
// bound exp(-(eps - 1/2)^2 / 2) at sigma 1 upper-bounds it
// (dp_accounting test_delta_bounds_gaussian).
TEST(RdpConversion, GaussianDeltaBetweenExactAndClassicalBounds) {
  std::vector<double> orders;
  for (int x = 10; x < 505; ++x) orders.push_back(0.1 * x);
  std::vector<double> rdp;
  for (double a : orders) rdp.push_back(rdp_subsampled_gaussian(1, 1, a));
  for (int x = 0; x < 500; ++x) {
    const double eps = 0.1 * x;
    const double delta = rdp_to_delta(orders, rdp, eps).delta;
    const double exact = std::erfc((eps - .5) / std::sqrt(2)) / 2 - std::exp(eps) * std::erfc((eps + .5) / std::sqrt(2)) / 2;
    EXPECT_LE(exact, delta + 1e-300) << "eps " << eps;
    const double classical = eps >= 0.5 ? std::exp(-0.5 * (eps - 0.5) * (eps - 0.5)) : 1.0;
    EXPECT_LE(delta, classical + 1e-300) << "eps " << eps;
  }
}

// A_alpha = E_{z ~ N(0, s^2)} [((1-q) + q exp((2z - 1) / (2 s^2)))^alpha] by
// composite Simpson's rule in long double over [-14 s - 1, alpha + 14 s + 1]
// (the two Gaussian bumps of the integrand sit at 0 and alpha), scaled by
// the integrand's largest value: an independent route to log(A).
double log_a_by_integration(double q, double sigma, double alpha) {
  const long double s2 = static_cast<long double>(sigma) * sigma;
  auto log_integrand = [&](long double z) {
    const long double ratio = std::log1p(q * std::expm1((2 * z - 1) / (2 * s2)));
    return -z * z / (2 * s2) - std::log(std::sqrt(2 * M_PIl * s2)) + alpha * ratio;
  };
  const long double lo = -14 * sigma - 1, hi = alpha + 14 * sigma + 1;
  const int64_t n = 400'000;  // even; h << the narrowest bump (sigma) in every case
  const long double h = (hi - lo) / n;
  long double peak = -INFINITY;
  for (int64_t i = 0; i <= n; ++i) peak = std::max(peak, log_integrand(lo + i * h));
  long double sum = 0;
  for (int64_t i = 0; i <= n; ++i) {
    const long double w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
    sum += w * std::exp(log_integrand(lo + i * h) - peak);
  }
  return static_cast<double>(std::log(sum * h / 3) + peak);
}

// The (q, sigma, order) cases dp_accounting's test_compute_log_a_equals_mp
// checks against mpmath (rtol 1e-4): log(A) = (order - 1) rdp. Order 256
// with sigma 0.1 is too sharp for a fixed grid and is left out here.
TEST(RdpNumerics, LogAMatchesNumericalIntegral) {
  struct Case {
    double q, sigma, order;
  };
  for (const Case& c : {Case{1e-7, .1, 1.01}, Case{1e-6, 1, 27}, Case{1e-4, 1., 1.5}, Case{1e-3, 1., 2},
                        Case{.01, 10, 20}, Case{.1, 100, 20.5}, Case{.999, 100, 256.1}, Case{0.04, 1.5, 3.7},
                        Case{0.3, 0.8, 12.5}}) {
    const double log_a = (c.order - 1) * rdp_subsampled_gaussian(c.q, c.sigma, c.order);
    const double reference = log_a_by_integration(c.q, c.sigma, c.order);
    EXPECT_NEAR(log_a, reference, 1e-7 * std::fabs(reference) + 1e-13)
        << "q " << c.q << " sigma " << c.sigma << " order " << c.order;
    // dp_accounting's absolute-term series bounds it from above.
    const double absolute = (c.order - 1) * rdp_subsampled_gaussian(c.q, c.sigma, c.order, FractionalSeries::absolute);
    EXPECT_GE(absolute, log_a * (1 - 1e-12)) << "q " << c.q << " sigma " << c.sigma << " order " << c.order;
  }
}

// More steps spend more; more noise spends less.
TEST(RdpProperties, EpsilonIncreasesWithStepsAndDecreasesWithNoise) {
  for (double q : {0.001, 0.02, 0.3}) {
    double previous = 0;
    for (int64_t steps : {1, 10, 100, 1000, 10000}) {
      const double e = rdp_epsilon({{1.1, q, steps}}, 1e-5).epsilon;
      EXPECT_GT(e, previous) << "q " << q << " steps " << steps;
      previous = e;
    }
    previous = kInf;
    for (double sigma : {0.5, 0.7, 1.0, 1.5, 2.5, 5.0, 10.0}) {
      const double e = rdp_epsilon({{sigma, q, 1000}}, 1e-5).epsilon;
      EXPECT_LT(e, previous) << "q " << q << " sigma " << sigma;
      previous = e;
    }
  }
}

TEST(RdpProperties, HistoryComposesByAddingCurves) {
  const std::vector<double> orders(default_rdp_orders().begin(), default_rdp_orders().end());
  const auto a = rdp_curve({{1.3, 0.01, 300}}, orders), b = rdp_curve({{0.9, 0.02, 50}}, orders);
  const auto both = rdp_curve({{1.3, 0.01, 300}, {0.9, 0.02, 50}}, orders);
  for (size_t k = 0; k < orders.size(); ++k) EXPECT_DOUBLE_EQ(both[k], a[k] + b[k]);
}

TEST(RdpProperties, DegenerateMechanisms) {
  EXPECT_EQ(rdp_epsilon({{1.0, 0.0, 100}}, 1e-5).epsilon, 0);  // nothing sampled
  EXPECT_EQ(rdp_epsilon({{0.0, 0.5, 1}}, 1e-5).epsilon, kInf);  // no noise
  EXPECT_EQ(rdp_epsilon({}, 1e-5).epsilon, 0);
}

TEST(RdpErrors, BadArgumentsAreConfigErrors) {
  EXPECT_THROW(rdp_subsampled_gaussian(1.5, 1, 2), ConfigError);
  EXPECT_THROW(rdp_subsampled_gaussian(0.1, -1, 2), ConfigError);
  EXPECT_THROW(rdp_subsampled_gaussian(0.1, 1, 0.5), ConfigError);
  EXPECT_THROW(rdp_epsilon({{1, 0.1, 10}}, 1.0), ConfigError);
  EXPECT_THROW(rdp_epsilon({{1, 0.1, 10}}, -1e-5), ConfigError);
  EXPECT_THROW(rdp_epsilon({{1, 0.1, -1}}, 1e-5), ConfigError);
}

}  // namespace
}  // namespace cohort::privacy::rdp_test
