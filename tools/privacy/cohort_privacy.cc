// cohort-privacy: the privacy budget of DP-SGD from the command line, like
// TF-Privacy's compute_dp_sgd_privacy and compute_noise.
//
//   cohort-privacy epsilon --noise-multiplier S --sample-rate Q --steps T
//       --delta D [--accountant rdp|prv]
//     prints the epsilon that T Poisson-sampled Gaussian steps (noise
//     multiplier S, sample rate Q) spend at delta D.
//   cohort-privacy noise-multiplier --target-epsilon E --sample-rate Q
//       --steps T --delta D [--accountant rdp|prv]
//     prints the smallest noise multiplier (within 0.01 of epsilon) whose
//     T steps spend at most E at delta D.
//
// The accountant defaults to rdp (cohort/privacy/rdp.h); prv is the tighter
// numerical one (cohort/privacy/prv.h), whose upper bound is printed. One
// number on stdout, 15 significant digits.
//
// Exit status: 0 success; 2 bad or impossible arguments (q outside (0, 1],
// a negative noise multiplier, delta outside (0, 1), a target no noise
// reaches), with one line on stderr; 1 any other failure.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/privacy/accountant.h"
#include "cohort/common/flags.h"

namespace {

using cohort::ConfigError;
using cohort::flags::parse_number;
using cohort::privacy::AccountantKind;

constexpr const char* kUsage =
    "usage: cohort-privacy epsilon --noise-multiplier S --sample-rate Q --steps T --delta D [--accountant rdp|prv]\n"
    "       cohort-privacy noise-multiplier --target-epsilon E --sample-rate Q --steps T --delta D "
    "[--accountant rdp|prv]\n";

struct Arguments {
  std::optional<double> noise_multiplier, target_epsilon, sample_rate, delta;
  std::optional<int64_t> steps;
  AccountantKind accountant = AccountantKind::rdp;
};

template <typename T>
T required(const std::optional<T>& value, const char* flag) {
  COHORT_CHECK_AS(ConfigError, value.has_value()) << flag << " is required";
  return *value;
}

Arguments parse(const std::string& command, const std::vector<std::string>& args) {
  Arguments a;
  std::map<std::string, cohort::flags::FlagSetter> flags{
      {"--sample-rate", [&](auto& f, auto& v) { a.sample_rate = parse_number<double>(f, v); }},
      {"--steps", [&](auto& f, auto& v) { a.steps = parse_number<int64_t>(f, v, int64_t{1}); }},
      {"--delta", [&](auto& f, auto& v) { a.delta = parse_number<double>(f, v); }},
      {"--accountant", [&](auto&, auto& v) { a.accountant = cohort::privacy::parse_accountant_kind(v); }},
  };
  if (command == "epsilon")
    flags["--noise-multiplier"] = [&](auto& f, auto& v) { a.noise_multiplier = parse_number<double>(f, v); };
  else
    flags["--target-epsilon"] = [&](auto& f, auto& v) { a.target_epsilon = parse_number<double>(f, v); };
  cohort::flags::parse_flags(args, flags, {});

  const double q = required(a.sample_rate, "--sample-rate"), delta = required(a.delta, "--delta");
  required(a.steps, "--steps");
  COHORT_CHECK_AS(ConfigError, q > 0 && q <= 1) << "--sample-rate must be in (0, 1], got " << q;
  COHORT_CHECK_AS(ConfigError, delta > 0 && delta < 1) << "--delta must be in (0, 1), got " << delta;
  if (command == "epsilon") {
    const double sigma = required(a.noise_multiplier, "--noise-multiplier");
    COHORT_CHECK_AS(ConfigError, sigma >= 0) << "--noise-multiplier must be non-negative, got " << sigma;
  } else {
    const double target = required(a.target_epsilon, "--target-epsilon");
    COHORT_CHECK_AS(ConfigError, target > 0) << "--target-epsilon must be positive, got " << target;
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h") {
    std::fputs(kUsage, all.empty() ? stderr : stdout);
    return all.empty() ? 2 : 0;
  }
  const std::string& command = all[0];
  try {
    COHORT_CHECK_AS(ConfigError, command == "epsilon" || command == "noise-multiplier")
        << "unknown command '" << command << "' (expected epsilon or noise-multiplier)";
    const Arguments a = parse(command, {all.begin() + 1, all.end()});
    double result;
    if (command == "epsilon") {
      result = cohort::privacy::epsilon_spent({{*a.noise_multiplier, *a.sample_rate, *a.steps}}, *a.delta,
                                              a.accountant);
    } else {
      result = cohort::privacy::noise_multiplier_for({.target_epsilon = *a.target_epsilon,
                                                      .delta = *a.delta,
                                                      .sample_rate = *a.sample_rate,
                                                      .steps = *a.steps,
                                                      .accountant = a.accountant});
    }
    std::printf("%.15g\n", result);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "cohort-privacy: %s\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-privacy: %s\n", cohort::flags::one_line_message(e).c_str());
    return 1;
  }
}
