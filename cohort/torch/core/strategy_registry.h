// The strategy registry: make_strategy() builds a strategy from a string,
// so that one flag chooses how a program is distributed, and every strategy
// makes itself known from its own file (as torch.distributed's
// Backend.register_backend does), so that a new one touches no shared file:
//
//   // my_strategy.cc
//   COHORT_REGISTER_STRATEGY(my_strategy, {
//       .name = "my_strategy",
//       .description = "one line for --help",
//       .keys = {{.name = "knob", .kind = cohort::SpecKey::Kind::integer, .default_value = "1", ...}},
//       .make = [](const cohort::Spec& spec) -> std::unique_ptr<cohort::Strategy> { ... }});
//
//   auto strategy = cohort::make_strategy(flags.strategy);   // "my_strategy:knob=2"
//
// Specs are NAME[:key=value,...] (cohort/common/spec.h). A wrapper (the
// privacy strategy) wraps the strategy written before it, joined by '+':
//
//   multi_worker:style=horovod+privacy:epsilon=3,max_grad_norm=1
//
// A '+' followed by a letter starts a wrapper; elsewhere it is part of a
// value (1e+5). Every error is one ConfigError line naming the bad name or
// key and the valid ones.
//
// Registration runs at static initialisation, from the library (or the
// program's object file) that defines the strategy: a program that links
// cohort::torch has every built-in strategy (cohort::torch links its
// libraries whether or not a symbol of theirs is used).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/common/spec.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

struct StrategyRegistration {
  std::string name;
  std::string description;  // one line, for --help
  std::vector<SpecKey> keys;
  // What the strategy needs of the program's model, in the program's terms
  // (one line; empty: a module whose forward takes one tensor, nothing
  // more). strategy_help() prints it under the strategy.
  std::string model_requirements;
  // When the strategy follows an elastic job's membership (one line; empty:
  // never), for the error that says which strategies can.
  std::string elastic;
  // A strategy: made from its validated spec (every default filled in).
  std::function<std::unique_ptr<Strategy>(const Spec& spec)> make;
  // A wrapper, instead of `make`: wraps the strategy written before it.
  std::function<std::unique_ptr<Strategy>(std::unique_ptr<Strategy> inner, const Spec& spec)> wrap;
};

// Adds a strategy (ConfigError: an empty or taken name, or not exactly one
// of make and wrap). Returns true, for COHORT_REGISTER_STRATEGY.
bool register_strategy(StrategyRegistration registration);

// Registers at static initialisation; `id` names the registration's static
// flag (any identifier unique in the file).
#define COHORT_REGISTER_STRATEGY(id, ...) \
  [[maybe_unused]] static const bool cohort_strategy_registered_##id = ::cohort::register_strategy(__VA_ARGS__)

// Every registration, strategies then wrappers, each sorted by name.
std::vector<StrategyRegistration> registered_strategies();

// The strategy `spec` names, wrapped by the wrappers after it; or, for
// "plan:FILE", the strategy of that plan file (cohort-plan --out;
// common/plan_file.h), warning on rank 0 where the launch differs from the
// plan (its tunables, ranks or backend).
std::unique_ptr<Strategy> make_strategy(const std::string& spec);

// What make_strategy() accepts: each registered name, its keys and their
// defaults.
std::vector<SpecSchema> strategy_schemas();
// The schemas as lines for a program's --help, each strategy's model
// requirements under it, and the '+' rule for wrappers.
std::string strategy_help();
// "multi_worker, zero, ..." with their conditions: the registered
// strategies that follow elastic membership, for errors.
std::string strategies_that_follow_membership();

}  // namespace cohort
