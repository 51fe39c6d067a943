// Replica agreement: the checks that catch data-parallel training going
// wrong without an error (Horovod trains on silently in both cases).
//
// - Parameter fingerprints: replicas must hold bitwise identical parameters
//   before every step (that is what broadcast_parameters at the start and
//   identical reduced gradients after it guarantee). At the first step and
//   every `every_steps` steps after it, each rank hashes the bytes of every
//   parameter (64 bits per parameter, one pass over memory) and the ranks
//   allgather the hashes: a difference is a MismatchError on every rank
//   naming the first differing parameter, the ranks that differ from rank 0,
//   and the usual cause (a missed broadcast_parameters). Cost: one pass over
//   the parameters and one allgather of 8 bytes per parameter, every
//   `every_steps` steps (COHORT_AGREEMENT_CHECK_STEPS, default 1000; 0 off).
// - Step counts: when a rank runs fewer steps than another, each of its later
//   steps pairs with another rank's earlier one, and the other rank's last
//   steps have no partner: they fail when the rank with fewer steps shuts
//   down (engine::PeerShutDownError). step_count_error() turns that into a
//   MismatchError naming both ranks and the step, pointing to join().
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"

namespace cohort {

// `every_steps` < 0 means the tunable; 0 disables.
int64_t agreement_check_interval(int64_t every_steps);

// True for step 1 and every `interval` steps after it (steps count from 1).
bool agreement_check_due(int64_t step, int64_t interval);

// 64-bit hashes of each tensor's bytes (dtype and shape included), equal on
// two ranks exactly when the tensors are bitwise equal (up to collisions).
std::vector<int64_t> parameter_fingerprints(const std::vector<at::Tensor>& params);

// Collective over `engine`'s ranks: allgathers every rank's fingerprints
// (named `op_name`, or an ordered submission when it is empty) and returns
// the handle of that allgather; check_agreement() compares after it is done.
struct AgreementCheck {
  engine::Handle handle;
  std::vector<int64_t> mine;
  std::shared_ptr<at::Tensor> gathered;
  int64_t step = 0;
};
AgreementCheck start_agreement_check(engine::Engine& engine, const std::string& op_name,
                                     const std::vector<at::Tensor>& params, int64_t step);
// Throws MismatchError (every rank alike) when some rank's parameters differ
// from rank 0's; `who` names the wrapper, `names` the parameters.
void check_agreement(const AgreementCheck& check, const std::string& who, const std::vector<std::string>& names);

// When `error` is an engine::PeerShutDownError: a MismatchError saying that
// `rank` was in step `step` when that rank shut down, so the ranks ran
// different numbers of steps (with the remedy). Otherwise `error` itself.
std::exception_ptr step_count_error(std::exception_ptr error, const std::string& who, int rank, int64_t step);

}  // namespace cohort
