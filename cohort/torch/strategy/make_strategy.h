// A strategy from a string, so that one flag chooses how a program is
// distributed:
//
//   auto strategy = cohort::make_strategy(flags.strategy);   // "multi_worker:style=horovod"
//
// Specs are NAME[:key=value,...] (cohort/common/spec.h). strategy_help()
// lists every strategy and its keys for a program's --help; a bad spec is a
// one-line ConfigError naming the bad name or key and the valid ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/common/spec.h"
#include "cohort/torch/core/strategy.h"

namespace cohort {

std::unique_ptr<Strategy> make_strategy(const std::string& spec);

// What make_strategy() accepts: each strategy, its keys and their defaults.
const std::vector<SpecSchema>& strategy_schemas();
std::string strategy_help();

}  // namespace cohort
