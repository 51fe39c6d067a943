// cohort::PerSample: marks a layer of a model of the program's own for
// DP-SGD's per-sample kernels (clipped_gradients.h). LibTorch C++ modules
// have no forward hooks, so a model that is not a torch::nn::Sequential says
// which layers the kernels should see by wrapping them, as ZeRO stage 3's
// units are marked with cohort::ShardedUnit (FSDP's manual wrapping):
//
//   struct BlockImpl : torch::nn::Cloneable<BlockImpl> {
//     BlockImpl() { reset(); }
//     void reset() override {  // every member built here: clone() calls it
//       conv = register_module("conv", cohort::PerSample(torch::nn::Conv2d(
//                                          torch::nn::Conv2dOptions(16, 16, 3).padding(1))));
//       norm = register_module("norm", cohort::PerSample(torch::nn::GroupNorm(4, 16)));
//     }
//     at::Tensor forward(const at::Tensor& x) { return torch::relu(x + norm(conv(x))); }
//     cohort::PerSample conv{nullptr}, norm{nullptr};
//   };
//
// While a private step traces its forward (clipped_gradient_sum on this
// thread), a PerSample records its input and its output's place in the
// autograd graph for the wrapped layer's kernel; anywhere else (plain
// training, evaluation, every other strategy, other threads) it only runs
// the wrapped module: one thread-local read beyond the call.
//
// Contracts: the wrapped module's forward takes and returns one tensor whose
// dim 0 is the batch (a layer fed [B * T, D] rows is a ConfigError while a
// private step traces: keep the sample dimension first, Linear takes
// [B, T, in]). A PerSample may run several times in one forward (weight
// sharing): see clipped_gradients.h. PerSamples do not nest. Like
// ShardedUnit it is a torch::nn::Cloneable: clone() gives a deep copy that
// runs its own copy of the wrapped module (which must be Cloneable too).
#pragma once

#include <torch/nn/pimpl.h>

#include <cstdint>

#include "cohort/torch/core/module_wrapper.h"

namespace cohort {

class PerSampleImpl : public ModuleWrapper<PerSampleImpl> {
 public:
  // Any module holder (a TORCH_MODULE type, torch::nn::Sequential) whose
  // forward takes and returns one tensor, registered as the child "module".
  template <ModuleHolderType Holder>
  explicit PerSampleImpl(const Holder& module) : ModuleWrapper(module) {}

  // The wrapped module's forward (run(): alone, never recorded, what the
  // layer's own micro-batches re-run); recorded while a private step traces.
  at::Tensor forward(const at::Tensor& input);
};
TORCH_MODULE(PerSample);

namespace privacy {

// The autograd nodes a call of a layer made: sequence numbers [begin, end)
// of this thread's (at::sequence_number), so a node of the graph can be
// told to belong to the call.
struct NodeRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool holds(uint64_t sequence_nr) const { return sequence_nr >= begin && sequence_nr < end; }
};

// What a private step's trace implements: told of every layer it watches
// as the layer runs (a PerSample, or the private step itself for the layers
// of a Sequential), with the input the layer took, the output it gave and
// the nodes the call made.
class LayerRecorder {
 public:
  virtual ~LayerRecorder() = default;
  virtual void record(const torch::nn::Module& layer, const at::Tensor& input, const at::Tensor& output,
                      NodeRange nodes) = 0;
};

// This thread's recorder while a RecordingScope lives, else null.
LayerRecorder* active_recorder();

// Makes `recorder` this thread's for its lifetime (the previous one back
// after it).
class RecordingScope {
 public:
  explicit RecordingScope(LayerRecorder* recorder);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  LayerRecorder* previous_;
};

}  // namespace privacy
}  // namespace cohort
