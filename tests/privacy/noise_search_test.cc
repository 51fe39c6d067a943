// noise_multiplier_for against Opacus's get_noise_multiplier tests, and its
// contract: the result never overshoots the target.
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/common/error.h"
#include "cohort/privacy/accountant.h"

namespace cohort::privacy::noise_search_test {
namespace {

void expect_almost_equal(double actual, double expected, int places) {
  EXPECT_LT(std::fabs(actual - expected), 0.5 * std::pow(10.0, -places))
      << "actual " << actual << " expected " << expected << " to " << places << " places";
}

// pytorch/opacus, opacus/tests/accountants_test.py: target epsilon 8, delta
// 1e-5, q 0.04; 90 epochs are int(90 / 0.04) = 2250 steps.
// test_get_noise_multiplier_rdp_epochs (1.416), _rdp_steps (1.3562),
// _prv_epochs (1.34765625), _prv_steps (1.2915), all places=4.
TEST(NoiseSearchReference, OpacusGetNoiseMultiplier) {
  const NoiseSearch base{.target_epsilon = 8, .delta = 1e-5, .sample_rate = 0.04};
  auto with = [&](int64_t steps, AccountantKind kind) {
    NoiseSearch s = base;
    s.steps = steps;
    s.accountant = kind;
    return noise_multiplier_for(s);
  };
  expect_almost_equal(with(2250, AccountantKind::rdp), 1.416, 4);
  expect_almost_equal(with(2000, AccountantKind::rdp), 1.3562, 4);
  expect_almost_equal(with(2250, AccountantKind::prv), 1.34765625, 4);
  expect_almost_equal(with(2000, AccountantKind::prv), 1.2915, 4);
}

// Opacus's test_get_noise_multiplier_overshoot, over a fixed sample of its
// hypothesis domain: epsilon in [1, 10], epochs 10..100, q and delta from
// its lists; the returned sigma spends less than the target, and no more
// than epsilon_tolerance less.
TEST(NoiseSearchProperties, NeverOvershootsTheTarget) {
  const double rates[] = {1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1};
  const double deltas[] = {1e-4, 1e-5, 1e-6};
  for (int i = 0; i < 10; ++i) {
    const double target = 1.0 + 0.9 * i + 0.037 * i * i / 9;
    const int epochs = 10 + 9 * i;
    const double q = rates[(3 * i + 1) % 10], delta = deltas[i % 3];
    const auto steps = static_cast<int64_t>(epochs / q);
    const double sigma =
        noise_multiplier_for({.target_epsilon = target, .delta = delta, .sample_rate = q, .steps = steps});
    const double spent = epsilon_spent({{sigma, q, steps}}, delta, AccountantKind::rdp);
    SCOPED_TRACE(testing::Message() << "target " << target << " q " << q << " steps " << steps);
    EXPECT_LT(spent, target);
    EXPECT_GE(spent, target - 0.01);
  }
}

TEST(NoiseSearchProperties, PrvSigmaMeetsItsTargetUnderPrv) {
  const NoiseSearch s{.target_epsilon = 3, .delta = 1e-5, .sample_rate = 2048.0 / 60000, .steps = 1172,
                      .accountant = AccountantKind::prv};
  const double sigma = noise_multiplier_for(s);
  const double spent = epsilon_spent({{sigma, s.sample_rate, s.steps}}, s.delta, AccountantKind::prv);
  EXPECT_LE(spent, 3);
  EXPECT_GE(spent, 3 - 0.01);
}

TEST(NoiseSearchErrors, BadArgumentsAndUnreachableTargets) {
  const NoiseSearch ok{.target_epsilon = 1, .delta = 1e-5, .sample_rate = 0.01, .steps = 100};
  auto with = [&](auto change) {
    NoiseSearch s = ok;
    change(s);
    return s;
  };
  EXPECT_THROW(noise_multiplier_for(with([](NoiseSearch& s) { s.target_epsilon = 0; })), ConfigError);
  EXPECT_THROW(noise_multiplier_for(with([](NoiseSearch& s) { s.delta = 1; })), ConfigError);
  EXPECT_THROW(noise_multiplier_for(with([](NoiseSearch& s) { s.sample_rate = 0; })), ConfigError);
  EXPECT_THROW(noise_multiplier_for(with([](NoiseSearch& s) { s.sample_rate = 1.01; })), ConfigError);
  EXPECT_THROW(noise_multiplier_for(with([](NoiseSearch& s) { s.steps = 0; })), ConfigError);
  // An epsilon of 1e-9 over a trillion unsampled steps needs more noise than
  // the search allows.
  try {
    noise_multiplier_for(with([](NoiseSearch& s) {
      s.target_epsilon = 1e-9;
      s.sample_rate = 1;
      s.steps = 1'000'000'000'000;
    }));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unreachable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::privacy::noise_search_test
