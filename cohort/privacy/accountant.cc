#include "cohort/privacy/accountant.h"

#include <cmath>

#include "cohort/common/check.h"
#include "cohort/privacy/prv.h"
#include "cohort/privacy/rdp.h"

namespace cohort::privacy {

AccountantKind parse_accountant_kind(std::string_view name) {
  if (name == "rdp") return AccountantKind::rdp;
  if (name == "prv") return AccountantKind::prv;
  COHORT_THROW(ConfigError) << "accountant must be rdp or prv, got '" << name << "'";
}

std::string_view accountant_name(AccountantKind kind) { return kind == AccountantKind::rdp ? "rdp" : "prv"; }

double epsilon_spent(const History& history, double delta, AccountantKind kind) {
  COHORT_CHECK_AS(ConfigError, delta > 0 && delta < 1) << "delta must be in (0, 1), got " << delta;
  if (kind == AccountantKind::rdp) return rdp_epsilon(history, delta).epsilon;
  return prv_epsilon(history, delta).upper;
}

void Accountant::set_history(History history) {
  for (const Segment& s : history) validate(s);
  history_ = std::move(history);
}

double noise_multiplier_for(const NoiseSearch& search) {
  COHORT_CHECK_AS(ConfigError, search.target_epsilon > 0)
      << "target epsilon must be positive, got " << search.target_epsilon;
  COHORT_CHECK_AS(ConfigError, search.delta > 0 && search.delta < 1)
      << "delta must be in (0, 1), got " << search.delta;
  COHORT_CHECK_AS(ConfigError, search.sample_rate > 0 && search.sample_rate <= 1)
      << "sample rate must be in (0, 1], got " << search.sample_rate;
  COHORT_CHECK_AS(ConfigError, search.steps > 0) << "steps must be positive, got " << search.steps;
  COHORT_CHECK_AS(ConfigError, search.epsilon_tolerance > 0)
      << "epsilon tolerance must be positive, got " << search.epsilon_tolerance;

  auto epsilon_at = [&](double sigma) {
    return epsilon_spent({{sigma, search.sample_rate, search.steps}}, search.delta, search.accountant);
  };
  double sigma_low = 0, sigma_high = 10, epsilon_high = INFINITY;
  while (epsilon_high > search.target_epsilon) {
    sigma_high *= 2;
    COHORT_CHECK_AS(ConfigError, sigma_high <= search.max_noise_multiplier)
        << "target epsilon " << search.target_epsilon << " is unreachable at delta " << search.delta << " over "
        << search.steps << " steps at sample rate " << search.sample_rate << ": noise multiplier "
        << sigma_high / 2 << " still spends " << epsilon_high;
    epsilon_high = epsilon_at(sigma_high);
  }
  // epsilon_high <= target throughout; 200 halvings exhaust a double's
  // resolution should rounding keep epsilon from settling within tolerance.
  for (int i = 0; i < 200 && search.target_epsilon - epsilon_high > search.epsilon_tolerance; ++i) {
    const double sigma = (sigma_low + sigma_high) / 2;
    const double epsilon = epsilon_at(sigma);
    if (epsilon < search.target_epsilon) {
      sigma_high = sigma;
      epsilon_high = epsilon;
    } else {
      sigma_low = sigma;
    }
  }
  return sigma_high;
}

}  // namespace cohort::privacy
