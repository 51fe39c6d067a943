// PowerSGD gradient compression as a DistributedDataParallel comm hook
// (Vogels et al., 2019; PyTorch's powerSGD_hook).
//
// Every gradient of a bucket with at least two dimensions is viewed as an
// n x m matrix M (n = dim 0) and, when compressing pays, replaced by a rank-r
// approximation computed with one step of power iteration shared by all
// ranks:
//   P = avg_ranks(M_i Q);  P = orthonormal basis of P (QR);
//   Q = avg_ranks(M_i^T P);  M ~= P Q^T
// so each rank sends (n + m) r numbers instead of n m. Gradients that do not
// compress (vectors, or n m <= (n + m) r min_compression_rate) are averaged
// exactly in one allreduce per bucket.
//
// - Error feedback (use_error_feedback): each rank adds what compression
//   lost last time (its local M_i minus the shared approximation) to its
//   next gradient, so the error does not accumulate in the model.
// - Warm start (warm_start): Q of the previous iteration seeds the next
//   power iteration instead of a fresh random matrix.
// - The first start_iteration synchronised iterations use plain allreduce
//   (the buckets are rebuilt after the first one).
// - With r >= min(n, m) the approximation is exact up to rounding (P spans
//   M's column space). Random matrices come from `seed`, the same on every
//   rank, so every rank computes the same Q.
// State (errors, Q) is per bucket and dropped when the buckets are rebuilt.
#pragma once

#include <cstdint>
#include <memory>

#include "cohort/torch/data_parallel/comm_hooks.h"

namespace cohort {

struct PowerSgdOptions {
  int rank = 1;                       // r, the rank of the approximation
  int64_t start_iteration = 10;       // plain allreduce before this iteration
  double min_compression_rate = 2.0;  // compress only when n m > (n + m) r * this
  bool use_error_feedback = true;
  bool warm_start = true;
  uint64_t seed = 0;
};

std::shared_ptr<CommHook> powersgd_hook(PowerSgdOptions options = {});

}  // namespace cohort
