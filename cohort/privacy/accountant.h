// One entry point over the two accountants (rdp.h, prv.h): the epsilon a
// history has spent, an Accountant that records steps as training takes
// them, and the noise multiplier that meets a budget (Opacus's
// make_private_with_epsilon, TF-Privacy's compute_noise).
//
//   cohort::privacy::Accountant accountant(AccountantKind::prv);
//   accountant.step(sigma, q);          // once per DP-SGD step
//   double spent = accountant.epsilon(1e-5);
//
//   double sigma = noise_multiplier_for({.target_epsilon = 3, .delta = 1e-5,
//                                        .sample_rate = q, .steps = T});
#pragma once

#include <string_view>

#include "cohort/privacy/history.h"

namespace cohort::privacy {

enum class AccountantKind { rdp, prv };

// "rdp" or "prv"; anything else is a ConfigError naming both.
AccountantKind parse_accountant_kind(std::string_view name);
std::string_view accountant_name(AccountantKind kind);

// The epsilon to report for `history` at `delta` in (0, 1): the RDP bound, or
// the PRV accountant's upper bound (prv.h, default errors).
double epsilon_spent(const History& history, double delta, AccountantKind kind);

class Accountant {
 public:
  explicit Accountant(AccountantKind kind = AccountantKind::rdp) : kind_(kind) {}

  // Records `steps` steps with noise multiplier sigma at sample rate q.
  void step(double noise_multiplier, double sample_rate, int64_t steps = 1) {
    append_steps(history_, noise_multiplier, sample_rate, steps);
  }
  double epsilon(double delta) const { return epsilon_spent(history_, delta, kind_); }

  AccountantKind kind() const { return kind_; }
  const History& history() const { return history_; }
  // Replaces the history (a restored checkpoint's); each segment validated.
  void set_history(History history);

 private:
  AccountantKind kind_;
  History history_;
};

struct NoiseSearch {
  double target_epsilon = 0;  // > 0
  double delta = 0;           // in (0, 1)
  double sample_rate = 0;     // in (0, 1]
  int64_t steps = 0;          // > 0
  AccountantKind accountant = AccountantKind::rdp;
  // The search stops once epsilon is within this much below the target.
  double epsilon_tolerance = 0.01;
  // Larger noise than this and the target counts as unreachable.
  double max_noise_multiplier = 1e6;
};

// The noise multiplier whose epsilon after `steps` steps is at most the
// target and within epsilon_tolerance of it: sigma doubled from 20 until the
// target is met, then bisected between 0 and that (Opacus's
// get_noise_multiplier, so its results reproduce). Throws ConfigError for
// arguments out of range and for a target no noise up to
// max_noise_multiplier meets.
double noise_multiplier_for(const NoiseSearch& search);

}  // namespace cohort::privacy
