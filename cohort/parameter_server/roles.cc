#include "cohort/parameter_server/roles.h"

#include "cohort/common/check.h"

namespace cohort::ps {

Role assign_role(int rank, int size, int servers) {
  COHORT_CHECK_AS(ConfigError, servers >= 1 && servers < size)
      << "parameter_server: servers=" << servers << " needs 1 <= servers < ranks (" << size << " ranks)";
  COHORT_CHECK_AS(ConfigError, rank >= 0 && rank < size) << "rank " << rank << " of " << size;
  const int workers = size - servers;
  Role r;
  r.num_servers = servers;
  r.num_workers = workers;
  r.server = rank >= workers;
  r.index = r.server ? rank - workers : rank;
  return r;
}

}  // namespace cohort::ps
