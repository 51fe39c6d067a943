#include "cohort/rendezvous/registration.h"

#include <unistd.h>

#include "cohort/common/check.h"
#include "cohort/common/host_key.h"
#include "cohort/rendezvous/auth.h"

namespace cohort::rendezvous {
namespace {

constexpr const char* kJobKey = "cohort/job";

std::string seat_key(int rank) { return "cohort/seat/" + std::to_string(rank); }

std::string this_host() {
  std::string name = net::host_label();  // as the user named it (cohortrun -H)
  return name.empty() ? "unknown-host" : name;
}

// The holder's description without the nonce, for messages.
std::string holder(const std::string& claim) { return claim.substr(0, claim.find(" (")); }

}  // namespace

std::string seat_claim() {
  // Drawn once per process: a pid alone may be reused, and two hosts may
  // share a name.
  static const std::string claim =
      this_host() + " pid " + std::to_string(::getpid()) + " (" + to_hex(random_bytes(8)) + ")";
  return claim;
}

void register_rank(Store& store, const LaunchInfo& info, const std::string& where) {
  const std::string job = info.job_id + " of " + std::to_string(info.size) + " ranks";
  const std::string registered = store.compare_set(kJobKey, "", job);
  COHORT_CHECK_AS(ConfigError, registered == job)
      << "rank " << info.rank << " cannot join job '" << info.job_id << "' of " << info.size << " ranks: the "
      << where << " belongs to job '" << registered
      << "'. Two jobs share one store address: give each its own port (MASTER_PORT, COHORT_STORE_ADDR or "
         "cohortrun --port)";
  const std::string mine = seat_claim();
  const std::string seat = store.compare_set(seat_key(info.rank), "", mine);
  COHORT_CHECK_AS(ConfigError, seat == mine)
      << "rank " << info.rank << " of job '" << info.job_id << "' is already taken by " << holder(seat)
      << " at the " << where
      << ": another job (or another process with the same rank) uses this store address. This process ("
      << holder(mine) << ") is not joining; give each job its own port (MASTER_PORT, COHORT_STORE_ADDR or "
         "cohortrun --port) and, under torchrun, its own TORCHELASTIC_RUN_ID or COHORT_JOB_ID";
}

}  // namespace cohort::rendezvous
