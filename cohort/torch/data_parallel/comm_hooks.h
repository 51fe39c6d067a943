// Communication hooks of DistributedDataParallel (PyTorch's DDP comm hooks):
// how one bucket of gradients is averaged over the ranks.
//
//   DistributedDataParallelOptions o;
//   o.comm_hook = cohort::fp16_compress_hook();
//
// The Reducer (reducer.h) calls a hook twice per bucket and synchronised
// backward pass:
// - launch(bucket, engine): as soon as the bucket's last gradient is ready,
//   on autograd's thread. bucket.buffer holds this rank's gradient divided
//   by the number of ranks (the Reducer folds that into its copy), so the sum
//   over ranks is the average; unless the hook's averages_over_ranks() is
//   true: then it holds the gradient itself and the hook's communication
//   divides. Start communication here (ordered submissions) so that it
//   overlaps the rest of backward; do not wait.
// - finish(bucket, engine): at the end of backward, after every bucket was
//   launched. On return bucket.buffer must hold the average over ranks (or
//   the hook's approximation of it).
// Buckets are launched in index order and finished in index order on every
// rank, so a hook's ordered submissions line up across ranks as long as it
// makes the same submissions for the same bucket on every rank.
// buckets_rebuilt() is called when the Reducer rebuilds its buckets (once,
// after the first iteration, and at each bucket cap the autotuner tries):
// per-bucket state keyed by index is stale then. A hook whose state should
// outlive that says so (keeps_bucket_state()), and DDP does not tune its cap.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"

namespace cohort {

// One bucket as hooks see it: a flat buffer and, for hooks that work per
// tensor (PowerSGD), each gradient as a view into it, shaped like its
// parameter.
struct GradBucket {
  size_t index = 0;
  at::Tensor buffer;                  // flat, contiguous, one dtype
  std::vector<at::Tensor> gradients;  // views into buffer
  std::vector<std::string> names;     // of the parameters, same order
  bool last = false;                  // the last bucket of the iteration
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual void launch(GradBucket& bucket, engine::Engine& engine) = 0;
  virtual void finish(GradBucket& bucket, engine::Engine& engine) = 0;
  virtual void buckets_rebuilt() {}
  // True: launch() gets undivided gradients and averages them itself, e.g.
  // with an avg allreduce whose division rides on the reduction (a bucket
  // that autograd filled in place then costs no scaling pass at all).
  virtual bool averages_over_ranks() const { return false; }
  // True: per-bucket state that a rebuild loses (PowerSGD's error feedback
  // and warm start); DDP then keeps its bucket cap out of the autotuner.
  virtual bool keeps_bucket_state() const { return false; }
};

// The default: the bucket is averaged in place over ranks by one allreduce,
// whose division rides on the reduction (no scratch, no scaling pass). Exact
// up to float rounding.
std::shared_ptr<CommHook> allreduce_hook();

// The bucket is summed in place over ranks: with averages_over_ranks() false,
// the Reducer has already divided it, so the sum is the average. For hooks
// that fall back to a plain allreduce on such buckets (PowerSGD's warm-up).
std::shared_ptr<CommHook> sum_allreduce_hook();

// The bucket travels as float16 (already divided by the number of ranks, so
// the sum overflows only where the average would) and comes back in its own
// dtype.
// Expected error: about 2^-11 relative per rounding (compression.h).
std::shared_ptr<CommHook> fp16_compress_hook();

}  // namespace cohort
