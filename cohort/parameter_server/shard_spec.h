// ShardSpec: a shard's place (ShardInfo) and its variable's description
// (VariableSpec) as one line of text, as declare and promote requests carry
// them.
#pragma once

#include <string>
#include <string_view>

#include "cohort/parameter_server/layout.h"

namespace cohort::ps {

struct ShardSpec {
  ShardInfo info;
  VariableSpec variable;

  std::string encode() const;
  static ShardSpec decode(std::string_view line);  // Error when malformed
};

}  // namespace cohort::ps
