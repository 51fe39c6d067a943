#include "cohort/torch/core/strategy_registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/plan_file.h"
#include "cohort/rendezvous/discovery.h"

namespace cohort {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, StrategyRegistration> entries;  // by name
};

// A function-local static: strategies register from other translation
// units' static initialisers, in no particular order.
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registrations outlive static destruction order
  return *r;
}

bool is_wrapper(const StrategyRegistration& r) { return static_cast<bool>(r.wrap); }

// `text` cut at every '+' that starts a wrapper (a '+' followed by a letter
// or '_'; one inside a number, 1e+5, is not).
std::vector<std::string> split_wrappers(const std::string& text) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < text.size(); ++i) {
    const bool cut = text[i] == '+' && i + 1 < text.size() &&
                     (std::isalpha(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '_');
    if (cut) parts.emplace_back();
    else parts.back() += text[i];
  }
  return parts;
}

std::vector<SpecSchema> schemas_of(const std::vector<StrategyRegistration>& entries) {
  std::vector<SpecSchema> schemas;
  for (const auto& r : entries) schemas.push_back({.name = r.name, .description = r.description, .keys = r.keys});
  return schemas;
}

// This process's launch as init() would discover it; nullopt when it was
// not launched, or discovery needs what only init() has (mpirun without a
// store address bootstraps one over MPI).
std::optional<rendezvous::LaunchInfo> this_launch() {
  if (rendezvous::launched_by() == rendezvous::LaunchSource::single) return std::nullopt;
  try {
    return rendezvous::discover();
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

// "plan:FILE": the strategy of cohort-plan's chosen plan. What the launch
// does not match (a tunable, the ranks, the backend) is said, on rank 0 or
// where the launch is unknown, not refused: the program still trains
// correctly, only not as the plan predicted.
std::unique_ptr<Strategy> make_planned_strategy(const std::string& path) {
  COHORT_CHECK_AS(ConfigError, !path.empty()) << "strategy 'plan:' needs a file: plan:plan.json (cohort-plan --out)";
  const PlanFile plan = read_plan_file(path);
  const std::optional<rendezvous::LaunchInfo> launch = this_launch();
  if (!launch || launch->rank == 0)
    for (const std::string& difference : plan_differences(plan, launch ? launch->size : 0))
      COHORT_LOG(warn) << path << ": " << difference
                       << "; launch with the plan's command to run it as predicted: " << plan.command;
  return make_strategy(plan.strategy);
}

}  // namespace

bool register_strategy(StrategyRegistration registration) {
  COHORT_CHECK_AS(ConfigError, !registration.name.empty()) << "register_strategy: the strategy has no name";
  COHORT_CHECK_AS(ConfigError, static_cast<bool>(registration.make) != static_cast<bool>(registration.wrap))
      << "register_strategy: '" << registration.name << "' must have either make (a strategy) or wrap (a wrapper), not "
      << (registration.make ? "both" : "neither");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string name = registration.name;
  COHORT_CHECK_AS(ConfigError, r.entries.emplace(name, std::move(registration)).second)
      << "register_strategy: a strategy named '" << name << "' is registered already";
  return true;
}

std::vector<StrategyRegistration> registered_strategies() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<StrategyRegistration> entries;
  for (const auto& [name, entry] : r.entries) entries.push_back(entry);
  std::stable_partition(entries.begin(), entries.end(), [](const auto& e) { return !is_wrapper(e); });
  return entries;
}

std::vector<SpecSchema> strategy_schemas() { return schemas_of(registered_strategies()); }

std::unique_ptr<Strategy> make_strategy(const std::string& text) {
  if (text.starts_with("plan:")) return make_planned_strategy(text.substr(5));
  const std::vector<StrategyRegistration> entries = registered_strategies();
  const std::vector<SpecSchema> schemas = schemas_of(entries);
  const auto entry_of = [&](const std::string& name) -> const StrategyRegistration& {
    return *std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.name == name; });
  };
  const std::vector<std::string> parts = split_wrappers(text);
  std::unique_ptr<Strategy> strategy;
  for (size_t i = 0; i < parts.size(); ++i) {
    // Validation names the unknown strategy with the valid ones.
    const Spec spec = parse_and_validate_spec(parts[i], schemas, "strategy");
    const StrategyRegistration& entry = entry_of(spec.name);
    if (i == 0) {
      COHORT_CHECK_AS(ConfigError, !is_wrapper(entry))
          << "strategy '" << spec.name << "' wraps another strategy: write it after one, as in 'multi_worker+"
          << parts[0] << "'";
      strategy = entry.make(spec);
    } else {
      COHORT_CHECK_AS(ConfigError, is_wrapper(entry)) << "strategy '" << spec.name
                                                      << "' after '+' does not wrap another strategy (the wrappers: " <<
          [&] {
            std::string names;
            for (const auto& e : entries)
              if (is_wrapper(e)) names += (names.empty() ? "" : ", ") + e.name;
            return names.empty() ? std::string("none") : names;
          }() << ")";
      strategy = entry.wrap(std::move(strategy), spec);
    }
    COHORT_CHECK(strategy != nullptr) << "strategy '" << spec.name << "': its factory returned null";
  }
  return strategy;
}

std::string strategy_help() {
  const std::vector<StrategyRegistration> entries = registered_strategies();
  std::ostringstream out;
  for (const StrategyRegistration& e : entries) {
    const std::string lines = format_spec_schemas({{.name = e.name, .description = e.description, .keys = e.keys}});
    // The requirements right under the strategy's line, before its keys.
    const size_t first = lines.find('\n') + 1;
    out << lines.substr(0, first);
    if (!e.model_requirements.empty()) out << "      (the model: " << e.model_requirements << ")\n";
    out << lines.substr(first);
  }
  out << "  A wrapper follows the strategy it wraps, joined by '+': multi_worker+privacy:epsilon=3\n";
  out << "  plan:FILE  the strategy of cohort-plan's chosen plan (cohort-plan --out FILE)\n";
  return out.str();
}

std::string strategies_that_follow_membership() {
  std::string text;
  for (const StrategyRegistration& e : registered_strategies())
    if (!e.elastic.empty()) text += (text.empty() ? "" : "; ") + e.name + " (" + e.elastic + ")";
  return text.empty() ? "none is registered" : text;
}

}  // namespace cohort
