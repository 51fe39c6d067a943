// Pipeline schedules as plain lists of actions (torch-free, testable alone).
//
// A pipeline of `stages` stages runs `micro_batches` micro-batches through
// every stage forward, then backward. pipeline_actions() gives one stage's
// program: the order in which it receives, computes and sends. Pipeline
// (pipeline.h) executes it with blocking point-to-point messages, so the
// lists obey one more rule than "dependencies first": for every pair of
// neighbouring stages, the k-th message operation of one towards the other
// is a send exactly when the other's k-th operation towards it is a receive.
// Blocking sends and receives then always meet (a send returns once the
// receiver has taken the data), and since stages form a line no cycle of
// waits can form: the programs are deadlock-free whatever the message size
// and whichever backend buffers how much (pipeline_schedule_test.cc checks
// this by simulation for many sizes).
//
// - gpipe: every forward, then every backward (micro-batch order both
//   times). Up to `micro_batches` live activations per stage.
// - one_f_one_b: stage s runs min(stages - s - 1, m) warm-up forwards, then
//   alternates one forward and one backward, then drains the backwards.
//   At most stages - s micro-batches are live on stage s (forward done,
//   backward not yet), whatever m: activation memory is bounded by the
//   stage count. Where it alternates, stage s's "send activation, receive
//   gradient" meets stage s+1's "send gradient, receive activation"; the
//   lower stage sends first, the upper receives first.
#pragma once

#include <string>
#include <vector>

namespace cohort {

enum class Schedule { gpipe, one_f_one_b };

const char* schedule_name(Schedule schedule);

struct PipelineAction {
  enum class Kind {
    recv_activation,  // from stage - 1
    forward,
    send_activation,  // to stage + 1
    recv_gradient,    // from stage + 1
    backward,
    send_gradient,    // to stage - 1
  };
  Kind kind;
  int micro_batch;
  bool operator==(const PipelineAction&) const = default;
};

const char* action_name(PipelineAction::Kind kind);
// "forward(3)", for messages and tests.
std::string to_string(const PipelineAction& action);

// Stage `stage` of `stages`' program for `micro_batches` micro-batches.
// ConfigError unless stages >= 1, 0 <= stage < stages, micro_batches >= 1.
// The first stage has no receive-activation / send-gradient actions, the
// last no send-activation / receive-gradient ones.
std::vector<PipelineAction> pipeline_actions(Schedule schedule, int stages, int stage, int micro_batches);

// Forward-only program (evaluation): receive, forward, send per micro-batch.
std::vector<PipelineAction> forward_actions(int stages, int stage, int micro_batches);

// The largest number of micro-batches whose forward ran and whose backward
// has not, over the program.
int peak_live_micro_batches(const std::vector<PipelineAction>& actions);

}  // namespace cohort
