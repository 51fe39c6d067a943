// make_strategy(): a strategy from a string, so that one flag chooses how a
// program is distributed:
//
//   auto strategy = cohort::make_strategy(flags.strategy);   // "multi_worker:style=horovod"
//
// The registry behind it (every strategy registers itself from its own file)
// is core/strategy_registry.h; this header is where a program finds it
// beside the strategies of this folder.
#pragma once

#include "cohort/torch/core/strategy_registry.h"
