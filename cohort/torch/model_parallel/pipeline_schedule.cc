#include "cohort/torch/model_parallel/pipeline_schedule.h"

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort {
namespace {

using Kind = PipelineAction::Kind;

// Appends the actions of one micro-batch's forward or backward on `stage`,
// with the messages that surround it; `with_recv` / `with_send` say whether
// the stage's neighbour exists (the ends of the line have none).
struct Builder {
  int stages;
  int stage;
  std::vector<PipelineAction> out;

  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  void add(Kind k, int mb) { out.push_back({k, mb}); }
  void recv_forward(int mb) {
    if (!first()) add(Kind::recv_activation, mb);
  }
  void send_forward(int mb) {
    if (!last()) add(Kind::send_activation, mb);
  }
  void recv_backward(int mb) {
    if (!last()) add(Kind::recv_gradient, mb);
  }
  void send_backward(int mb) {
    if (!first()) add(Kind::send_gradient, mb);
  }
};

void check_shape(int stages, int stage, int micro_batches) {
  COHORT_CHECK_AS(ConfigError, stages >= 1) << "a pipeline needs at least one stage, got " << stages;
  COHORT_CHECK_AS(ConfigError, stage >= 0 && stage < stages)
      << "pipeline stage " << stage << " outside [0, " << stages << ")";
  COHORT_CHECK_AS(ConfigError, micro_batches >= 1)
      << "PipelineOptions::micro_batches must be at least 1, got " << micro_batches;
}

}  // namespace

const char* schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
  }
  return "?";
}

const char* action_name(PipelineAction::Kind kind) {
  switch (kind) {
    case Kind::recv_activation: return "recv_activation";
    case Kind::forward: return "forward";
    case Kind::send_activation: return "send_activation";
    case Kind::recv_gradient: return "recv_gradient";
    case Kind::backward: return "backward";
    case Kind::send_gradient: return "send_gradient";
  }
  return "?";
}

std::string to_string(const PipelineAction& action) {
  return std::string(action_name(action.kind)) + "(" + std::to_string(action.micro_batch) + ")";
}

std::vector<PipelineAction> pipeline_actions(Schedule schedule, int stages, int stage, int micro_batches) {
  check_shape(stages, stage, micro_batches);
  Builder b{stages, stage, {}};
  const int m = micro_batches;
  if (schedule == Schedule::gpipe) {
    for (int j = 0; j < m; ++j) {
      b.recv_forward(j);
      b.add(Kind::forward, j);
      b.send_forward(j);
    }
    for (int j = 0; j < m; ++j) {
      b.recv_backward(j);
      b.add(Kind::backward, j);
      b.send_backward(j);
    }
    return std::move(b.out);
  }

  // 1F1B. Stage s keeps stages - s - 1 forwards ahead of its backwards: the
  // number of micro-batches in flight between it and the last stage.
  const int warmup = std::min(stages - stage - 1, m);
  const int steady = m - warmup;
  for (int j = 0; j < warmup; ++j) {
    b.recv_forward(j);
    b.add(Kind::forward, j);
    b.send_forward(j);
  }
  if (steady > 0) b.recv_forward(warmup);
  for (int i = 0; i < steady; ++i) {
    const int fwd = warmup + i;
    b.add(Kind::forward, fwd);
    // Meets stage + 1's "send gradient, receive activation" (it received
    // first): this lower stage sends first.
    b.send_forward(fwd);
    b.recv_backward(i);
    b.add(Kind::backward, i);
    if (i + 1 < steady) {
      // Meets stage - 1's "send activation, receive gradient": as the upper
      // stage of that pair, receive first. The gradient goes out after.
      b.recv_forward(fwd + 1);
      b.send_backward(i);
    } else {
      b.send_backward(i);
    }
  }
  for (int i = steady; i < m; ++i) {
    b.recv_backward(i);
    b.add(Kind::backward, i);
    b.send_backward(i);
  }
  return std::move(b.out);
}

std::vector<PipelineAction> forward_actions(int stages, int stage, int micro_batches) {
  check_shape(stages, stage, micro_batches);
  Builder b{stages, stage, {}};
  for (int j = 0; j < micro_batches; ++j) {
    b.recv_forward(j);
    b.add(Kind::forward, j);
    b.send_forward(j);
  }
  return std::move(b.out);
}

int peak_live_micro_batches(const std::vector<PipelineAction>& actions) {
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.kind == Kind::forward) peak = std::max(peak, ++live);
    if (a.kind == Kind::backward) --live;
  }
  return peak;
}

}  // namespace cohort
