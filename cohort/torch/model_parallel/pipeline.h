// Pipeline parallelism: one stage of a model per rank of a pipeline group,
// micro-batches flowing through the stages under a GPipe or 1F1B schedule.
//
//   Mesh mesh({.dp = 2, .pp = 4});
//   auto stage = stage_of(model, partition_sequential(model, 4), mesh.rank(MeshAxis::pp));
//   Pipeline pipe(stage, mesh.comm(MeshAxis::pp), {.micro_batches = 8});
//   for (...) {
//     opt.zero_grad();
//     at::Tensor loss = pipe.train_step(x, y, [](auto& out, auto& y) { return mse_loss(out, y); });
//     synchronize_gradients(stage->parameters(), mesh.engine(MeshAxis::dp));
//     opt.step();
//   }
//
// Contracts:
// - Construction is collective over `pp`; every stage passes the same
//   options (checked: ConfigError naming the stages that differ). Stage i is
//   the rank i of `pp`. The Pipeline uses `pp` from the calling thread only
//   (the training thread): nothing else may use it while the Pipeline lives.
// - A stage is called as forward(x) with one tensor in, one tensor out. The
//   first stage gets micro-batches of the input (any dtype, e.g. int64 token
//   ids); the others get what their predecessor returned, as a leaf that
//   requires grad when floating point. Between stages outputs must be dense
//   CPU tensors of a floating dtype (they carry gradients back); the last
//   stage's output goes to loss_fn only.
// - train_step / forward are collective over `pp` (every stage calls them
//   together). `input` is read on the first stage only and `target` on the
//   last only (pass an undefined tensor elsewhere). Both are split along
//   dim 0 into micro_batches parts of rows B/m or B/m + 1 (the first B % m
//   one larger); B < m is a ConfigError on every stage, a target whose rows
//   differ from the input's a MismatchError.
// - train_step accumulates into the stage's parameters' .grad() what one
//   backward of the whole batch's mean loss would: micro-batch j's loss
//   (loss_fn must return its mean, one element) is scaled by rows_j / B. It
//   returns the batch's loss sum_j rows_j / B * loss_j, 0-dim, detached, in
//   the loss's dtype, on every stage. It does not zero or step anything.
// - Activations and gradients travel with point-to-point messages that carry
//   shape and dtype (activation_channel.h). A stage whose forward rejects
//   what it receives, a gradient whose shape differs from the output it
//   belongs to, or stages that disagree on the schedule raise an error naming
//   the stages and the micro-batch; the throwing rank's communicator aborts
//   the group as it unwinds, so the other stages fail as well (each stage
//   must let the exception destroy the Pipeline and the pp communicator, as
//   the usual scope-bound ownership does).
// - The schedules are deadlock-free with blocking messages of any size
//   (pipeline_schedule.h). 1F1B keeps at most pp.size() - stage micro-batches
//   alive on a stage; GPipe keeps all of them.
// - recompute_activations: a micro-batch's forward runs without autograd and
//   runs again, with it, just before its backward; only the stage input is
//   kept in between. The CPU generator's state is saved before the first run
//   and restored around the second, so dropout draws the same masks (other
//   generators, e.g. CUDA's, are not).
// - Stats count what the pipeline holds between a micro-batch's forward and
//   backward: its input and output tensors (input only with recompute).
//   Tensors autograd saves inside the stage are not counted: they grow with
//   the same number of live micro-batches.
#pragma once

#include <ATen/Tensor.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "cohort/comm/communicator.h"
#include "cohort/torch/model_parallel/gradient_sync.h"
#include "cohort/torch/model_parallel/pipeline_schedule.h"
#include "cohort/torch/model_parallel/stage_partition.h"

namespace cohort {

struct PipelineOptions {
  int micro_batches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  bool recompute_activations = false;
};

// One micro-batch's mean loss from the last stage's output and its target.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;
// A stage as a function: one tensor in, one out.
using StageFn = std::function<at::Tensor(const at::Tensor&)>;

class Pipeline {
 public:
  struct Stats {
    int stages = 0;
    int stage = 0;
    int64_t steps = 0;                 // train_step calls
    int peak_live_micro_batches = 0;   // most micro-batches between forward and backward at once
    size_t peak_activation_bytes = 0;  // most bytes held for them at once (see the file comment)
    size_t bytes_sent = 0;             // activation and gradient payloads
    size_t bytes_received = 0;
  };

  Pipeline(StageFn stage, std::shared_ptr<comm::Communicator> pp, PipelineOptions options = {});
  // Any module holder (torch::nn::Sequential, a custom module's holder,
  // std::shared_ptr<Impl>) whose forward takes and returns one tensor. The
  // Pipeline keeps the module alive.
  template <typename Module>
    requires requires(Module m, const at::Tensor& x) {
      { m->forward(x) } -> std::convertible_to<at::Tensor>;
    }
  Pipeline(Module module, std::shared_ptr<comm::Communicator> pp, PipelineOptions options = {})
      : Pipeline(StageFn([module](const at::Tensor& x) mutable -> at::Tensor { return module->forward(x); }),
                 std::move(pp), options) {}
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int stage() const;
  int stages() const;
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == stages() - 1; }
  const PipelineOptions& options() const;

  // See the file comment.
  at::Tensor train_step(const at::Tensor& input, const at::Tensor& target, const LossFn& loss_fn);

  // Forward only, without autograd, over min(micro_batches, B) micro-batches:
  // the last stage's outputs concatenated along dim 0, returned on every
  // stage (broadcast over pp; any dtype).
  at::Tensor forward(const at::Tensor& input);

  Stats stats() const;
  void reset_stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
