#include "cohort/parameter_server/shard_spec.h"

#include <sstream>

#include "cohort/common/check.h"
#include "cohort/parameter_server/wire.h"

namespace cohort::ps {

std::string ShardSpec::encode() const {
  std::ostringstream s;
  s << variable.name << '\t' << variable.rows << '\t' << variable.cols << '\t' << dtype_name(variable.dtype) << '\t'
    << variable.sparse << '\t' << info.variable << '\t' << info.index << '\t' << info.row_begin << '\t'
    << info.row_end << '\t' << info.partition << '\t' << variable.init.encode();
  return s.str();
}

ShardSpec ShardSpec::decode(std::string_view line) {
  const auto f = split_fields(line, '\t');
  COHORT_CHECK(f.size() == 11) << "malformed shard description '" << line << "'";
  ShardSpec s;
  try {
    s.variable = {.name = f[0], .rows = std::stoll(f[1]), .cols = std::stoll(f[2]), .dtype = parse_dtype(f[3]),
                  .sparse = f[4] == "1"};
    s.info = {.variable = static_cast<uint32_t>(std::stoul(f[5])), .index = static_cast<uint32_t>(std::stoul(f[6])),
              .row_begin = std::stoll(f[7]), .row_end = std::stoll(f[8]), .partition = std::stoi(f[9])};
    s.variable.init = Initializer::decode(f[10]);
  } catch (const std::logic_error&) {
    COHORT_THROW(Error) << "malformed shard description '" << line << "'";
  }
  return s;
}

}  // namespace cohort::ps
