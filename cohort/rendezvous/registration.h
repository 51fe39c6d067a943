// Registration: every rank claims its seat in the job's store before using
// it, so that a process of another job that reaches the same store address
// (two jobs started by hand on one MASTER_PORT, a copy-pasted environment) or
// a second process with the same rank is refused instead of silently taking
// a seat and leaving a job waiting for a rank that went elsewhere.
//
// Keys, in the store's root namespace:
//   cohort/job          "<job id> of <size> ranks": set by the first rank to
//                       register; every later one must match it
//   cohort/seat/<rank>  "<host> pid <pid> (<nonce>)" of the process holding
//                       the seat; the nonce is drawn once per process
//
// A process may register its seat again (a second init_world in the same
// process); another process may not, even after the holder exited: a store
// lives as long as its job, and cohort does not restart ranks.
//
// Jobs that get distinct ids (cohortrun, TORCHELASTIC_RUN_ID, Slurm, OpenMPI,
// COHORT_JOB_ID) never mix. Jobs whose id comes from the store address alone
// are told apart only by their seats: the first process to claim a rank's
// seat keeps it (docs/security.md).
#pragma once

#include <string>

#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

// Claims `info.rank`'s seat for `info.job_id` of `info.size` ranks. Throws
// ConfigError on the newcomer when the store belongs to another job or the
// seat is held by another process, naming both and the store (`where`).
void register_rank(Store& store, const LaunchInfo& info, const std::string& where);

// This process's claim: "<host> pid <pid> (<nonce>)".
std::string seat_claim();

}  // namespace cohort::rendezvous
