// ZeRO (Rajbhandari et al. 2020; DeepSpeed, PyTorch's
// ZeroRedundancyOptimizer and FSDP): data parallelism whose optimizer state
// (stage 1), gradients (stage 2) and parameters (stage 3) are split over the
// ranks instead of copied.
//
// Layout. The trainable parameters are packed, in reverse order (the order
// backward reaches them), into flat buckets of about `bucket_bytes`; every
// parameter becomes a view of its bucket, so nothing is copied twice. A
// bucket is padded (with zeros) to a multiple of the ranks; rank r owns
// block r of every bucket, 1/size of it, and its optimizer is made, by
// the program's OptimizerFactory, over those blocks alone: one shard tensor
// per bucket, each a view of the bucket. An optimizer step therefore writes
// this rank's block of the parameters in place.
//
// A step:
//   backward    as each bucket's parameters all have their gradients (hooks
//               after accumulation), the bucket's gradient is packed and
//               reduce-scattered (average) on the engine, in bucket order,
//               overlapping the rest of backward. Stage 1 keeps the packed
//               gradient (the parameters' .grad() become views of it, and
//               after step() this rank's block of it holds the average);
//               stage 2 drops the full gradient and keeps only this rank's
//               averaged block;
//   step()      waits for the reductions, steps the shard optimizer, and
//               allgathers every bucket's blocks back into the parameters
//               (with defer_gather it only starts that, and the caller
//               finishes each bucket as the next forward needs it).
// Communication per step: Psi elements reduce-scattered and Psi allgathered
// (the paper's 2 Psi, as much as an allreduce).
//
// Stage 3: the buckets are the caller's units (ZeroOptions::units, layers
// that run together), each rank keeps only its block of each (the shard is
// the parameter's only lasting copy), and the caller brackets each unit's
// use with gather() and release() (strategy/zero.h does, for a Sequential).
// In backward, once a unit's gradients are all accumulated, they are packed
// into the unit's own storage (its parameters are no longer needed), the
// gather of the unit backward needs next is started, then the unit's
// reduce-scatter; its storage is freed when the next unit launches. So at
// most two unit-sized buffers exist at any time (the order of collectives
// is the same on every rank). step() steps the
// blocks and gathers nothing: the next forward does. 3 Psi per step (a
// gather in forward, one in backward, the reduce-scatter).
//
// Contracts:
// - Every rank builds the same model (same parameters, shapes and dtype) and
//   starts from the same values (the zero strategy broadcasts rank 0's);
//   every rank runs backward and step() in the same order (ordered
//   collectives). One dtype for all trainable parameters.
// - The optimizer must keep per-element state only: torch::optim's SGD,
//   Adam, AdamW, Adagrad and RMSprop; any other (LBFGS, a custom one) is a
//   ConfigError naming it.
// - The optimizer's param groups are its own (one group over the shards):
//   learning-rate schedules set lr on them as on any optimizer.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>
#include <torch/optim/optimizer.h>

#include <array>
#include <utility>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/torch/core/element_state.h"  // optimizer_state_bytes
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/core/tensor_pieces.h"

namespace cohort {

class AccumulatedGradHooks;
class TensorHandle;

struct ZeroOptions {
  int stage = 1;  // 1: optimizer state sharded; 2: and gradients; 3: and parameters (units)
  // Stage 3: the parameters (indices into the constructor's list) of each
  // unit, in forward order; a unit is gathered, used and freed as one. The
  // units replace the buckets (bucket_bytes is ignored).
  std::vector<std::vector<size_t>> units;
  int64_t bucket_bytes = int64_t(25) << 20;  // flat buckets of about this many bytes
  // true: buckets are reduce-scattered during backward (one backward pass
  // per step). false: all in step(), after any number of backward passes
  // accumulated the step's gradients (pipeline micro-batches, gradient
  // accumulation).
  bool overlap = true;
  // Stages 1 and 2: step() starts the parameters' allgather (the bucket of
  // the first layers first) and returns; the caller finishes each bucket
  // just before the next forward needs it (finish_gather()), so the gather
  // overlaps that forward. Until then the parameters are stale: every other
  // member (and gather_parameters() in the strategy) finishes them first.
  bool defer_gather = false;
  engine::Engine* engine = nullptr;  // null: the thread's current engine
  // Hybrid sharding (FSDP's HYBRID_SHARD): `engine` is one shard group and
  // `replica_engine` joins this rank with the ranks holding the same blocks
  // in the other groups (a Mesh's dp axis, the other hosts); each averaged
  // block is averaged again across them. Null: one group, no replicas.
  engine::Engine* replica_engine = nullptr;
  // The dtype the optimizer steps this rank's blocks in. Undefined: float32
  // for bfloat16 or half parameters (master weights: compute and
  // communication in the parameters' precision, the update in float32, then
  // rounded), else the parameters' own.
  at::ScalarType master_dtype = at::ScalarType::Undefined;
};

// Bytes this rank holds, by category.
struct ZeroMemory {
  int64_t parameters = 0;  // the full parameters (stages 1 and 2 keep them all)
  int64_t gradients = 0;   // the full gradient (stage 1) or this rank's averaged blocks (stage 2)
  int64_t optimizer = 0;   // the optimizer's state (of this rank's blocks)
  int64_t buffers = 0;     // packed gradients (stage 2: two buffers; stage 3: units being reduced; not model state)
};

class ZeroOptimizer {
 public:
  // `parameters`: the model's trainable parameters (leaves requiring grad).
  ZeroOptimizer(const std::vector<at::Tensor>& parameters, const OptimizerFactory& make, ZeroOptions options);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // Drops every gradient (to undefined), as zero_grad(set_to_none) does.
  void zero_grad();
  // Collective: finishes this step's gradient reductions (launching any
  // bucket backward did not reach, with zero gradients), steps this rank's
  // blocks and allgathers the parameters.
  void step();

  torch::optim::Optimizer& shard_optimizer() { return *optimizer_; }

  // Stage 3 (FULL_SHARD): a unit's full parameters exist only between
  // gather() and release(). gather(u) waits for (and, when not prefetched,
  // starts) the allgather of unit u's blocks into its storage; prefetch(u)
  // starts it without waiting; release(u) frees the storage. Collective in
  // their order: every rank calls them in the same sequence. Backward
  // reuses each unit's storage for its gradient once they are all
  // accumulated (see the file comment). gather_all() / release_all()
  // hold the whole model (evaluation, checkpoints).
  // Stages 1 and 2 with defer_gather: waits for bucket `bucket`'s
  // parameters (finish_gathers(): all of them). Not collective.
  void finish_gather(size_t bucket);
  void finish_gathers();
  size_t bucket_of(size_t parameter) const { return bucket_of_.at(parameter); }

  int units() const;
  void gather(int unit);
  void prefetch(int unit);
  void release(int unit);
  void gather_all();
  void release_all();
  // Backward has reached unit `unit` (its gather hook runs): the later
  // units' buckets are sent now if a gradient of theirs never came.
  void backward_reached(int unit);
  // With every unit gathered (stage 3): this rank's blocks, and their
  // master copies, taken from the full parameters (after the program wrote
  // them: a checkpoint loaded).
  void reshard();
  // Elements this rank's collectives moved since zero_grad(), in the ZeRO
  // paper's accounting: a reduce-scatter or an allgather of a bucket counts
  // the bucket's (padded) elements, an allreduce (hybrid) twice its own.
  // Plain data parallelism's allreduce of the gradients is 2 Psi.
  int64_t communicated() const { return communicated_; }
  // Stage 3: the most unit-sized buffers that existed at once since
  // zero_grad(): a unit's full parameters (gathered, or arriving by a
  // prefetch) or its packed gradient (until its reduce-scatter has read it).
  int peak_unit_buffers() const { return peak_storages_; }

  // Collective. The optimizer one process would have over `parameters` (a
  // superset of this optimizer's, in the model's order; made by `make`),
  // holding every rank's state joined back per parameter, with this
  // optimizer's group options: what plain data parallelism saves, so a
  // checkpoint of it loads into DDP, one device, or ZeRO at any world size.
  // Every rank holds the whole state while it exists.
  std::unique_ptr<torch::optim::Optimizer> consolidated(const OptimizerFactory& make,
                                                        const std::vector<at::Tensor>& parameters);
  // Not collective: takes this rank's blocks of `full`'s state (an optimizer
  // as consolidated() returns, over the same parameters, of the same type)
  // and its group options.
  void load_consolidated(const torch::optim::Optimizer& full);
  // Sharded checkpoints (core/tensor_pieces.h's records; the format is
  // checkpoint/sharded_checkpoint.h's). `names`: the parameters' names, in
  // the constructor's order.
  // Not collective: this rank's elements of each parameter, of their master
  // copies and of their optimizer state. Hybrid sharding: the groups hold
  // the same blocks, so one group writes (the caller chooses).
  void write_shard(TensorPieceWriter& out, const std::vector<std::string>& names);
  // Collective: this rank's blocks, master copies and optimizer state from
  // `in`, whichever world size, stage or strategy wrote it; then stages 1
  // and 2 allgather the parameters (stage 3's next forward gathers them).
  // The group options are the caller's to restore.
  void read_shard(const TensorPieceReader& in, const std::vector<std::string>& names);
  // Collective: every parameter's whole value and state, written by the
  // ranks whose `out` is not null, one bucket at a time (allgathered, written,
  // dropped): no rank holds more than one bucket's full state. Returns the
  // most bytes of gathered state held at once.
  int64_t write_consolidated(TensorPieceWriter* out, const std::vector<std::string>& names);
  ZeroMemory memory() const;
  int64_t numel() const { return numel_; }          // Psi: the trainable elements
  int64_t owned_numel() const { return owned_; }    // this rank's blocks, summed (with their padding)
  int buckets() const;

 private:
  struct Bucket;
  void on_accumulated(size_t parameter);
  void launch(size_t bucket);
  void rearm();
  size_t bucket_of_unit(int unit) const;
  void note_storage(int change);
  void allocate_storage(Bucket& bucket);
  void free_storage(Bucket& bucket);
  at::Tensor pack_buffer(size_t bucket);
  at::Tensor reuse_storage(size_t bucket);
  void allgather_blocks();

  ZeroOptions options_;
  EngineRef engine_;
  std::vector<at::Tensor> parameters_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  int64_t numel_ = 0, owned_ = 0;
  std::array<at::Tensor, 2> pack_;  // stage 2: the packing buffers, in turn
  int storages_ = 0, peak_storages_ = 0;  // stage 3: units whose storage exists (parameters or gradient)
  std::vector<std::pair<at::DataPtr, size_t>> spares_;  // stage 3: freed unit storage for the next (bytes)
  int64_t communicated_ = 0;              // elements, since zero_grad()
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<AccumulatedGradHooks> hooks_;
};

// Per-rank bytes under ZeRO (the paper's section 3 accounting): Psi
// parameters of `bytes_per_element` (4 for fp32), K bytes of optimizer state
// per element, on `world` ranks. Stage 0 is plain data parallelism.
//   stage 0: Psi (b + b + K)          stage 2: Psi b + Psi (b + K) / N
//   stage 1: Psi (b + b) + Psi K / N  stage 3: Psi (b + b + K) / N
// With mixed precision (the paper's Table 1: b = 2, K = 12 for Adam with
// fp32 master weights) this is the paper's (2 + 2 + K) Psi and its shards.
double zero_bytes_per_rank(double psi, double bytes_per_element, double optimizer_bytes_per_element, int stage,
                           int world);

}  // namespace cohort
