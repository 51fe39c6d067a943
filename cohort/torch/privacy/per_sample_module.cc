#include "cohort/torch/privacy/per_sample_module.h"

#include <ATen/SequenceNumber.h>

namespace cohort {

at::Tensor PerSampleImpl::forward(const at::Tensor& input) {
  privacy::LayerRecorder* recorder = privacy::active_recorder();
  if (recorder == nullptr) return run(input);
  const uint64_t first = at::sequence_number::peek();
  at::Tensor output = run(input);
  recorder->record(*this, input, output, {first, at::sequence_number::peek()});
  return output;
}

namespace privacy {
namespace {

thread_local LayerRecorder* current_recorder = nullptr;

}  // namespace

LayerRecorder* active_recorder() { return current_recorder; }

RecordingScope::RecordingScope(LayerRecorder* recorder) : previous_(current_recorder) { current_recorder = recorder; }

RecordingScope::~RecordingScope() { current_recorder = previous_; }

}  // namespace privacy
}  // namespace cohort
