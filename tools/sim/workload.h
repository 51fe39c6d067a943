// Workload: one training step's compute as the communication layer sees it:
// when each gradient becomes ready for reduction, and how large it is.
//
// The step starts when the previous step's communication has completed
// (every rank has its reduced gradients); a tensor's ready_s counts from
// there, so the optimizer update and the forward pass are in the first
// tensor's ready_s. The step's compute ends at compute_end_s (the end of
// backward), and update_s more passes after both compute and communication
// are done before the next step starts.
//
// Two sources (file format in tools/sim/README.md):
//   - a model description: layers in forward order, each with its
//     parameter tensors and a share of the backward compute; a layer's
//     gradients are ready once backward has run every later layer;
//   - a timeline of a real run (COHORT_TIMELINE, see cohort/engine/
//     timeline.h): the steady-state step recovered from the allreduces'
//     submission times (timeline.h's workload_from_timeline).
#pragma once

#include <string>
#include <vector>

#include "cohort/common/json.h"

namespace cohort::sim {

struct Tensor {
  std::string name;
  double bytes = 0;
  double ready_s = 0;
  // The layer it belongs to: what ZeRO stage 3 gathers and frees as one
  // (a layer of a description; by default the name up to its last '.',
  // "grad/4.weight" -> "grad/4", as a Sequential's layers are named; empty:
  // that default).
  std::string unit;
};

// The default unit of a tensor named `name`.
std::string unit_of(const std::string& name);

struct Workload {
  std::string name;
  std::vector<Tensor> tensors;  // in ready order
  double compute_end_s = 0;     // >= every ready_s
  // The forward pass's share of the step's start (< 0: not recorded). Only
  // ZeRO's gathers, which the forward waits for layer by layer, need it.
  double forward_s = -1;
  double update_s = 0;
  int threads = 1;              // compute threads per rank (for CPU contention)
  // The tensors are DDP buckets recorded from a DDP run (ordered engine
  // submissions): they run as ordered ops, as recorded, never re-bucketed.
  bool ordered = false;
  double element_bytes = 4;     // of the gradients (compression halves f32)
  // The step period measured in the run the workload came from (0: unknown),
  // a check that the simulation of that setting reproduces it.
  double measured_step_s = 0;
  // The periods of that run's steps, one per step (empty: unknown): one
  // rank's step-to-step variation, which synchronous ranks wait for
  // (jitter.h). Only their spread around their median is used.
  std::vector<double> step_periods_s;
  // From a timeline: the median wait of each step's first op before a cycle
  // picked it up (the engine slept through the forward pass: its wake-up
  // latency in that run, a hint for the topology's engine.wake_s).
  double measured_wake_s = 0;
  std::string source;

  double total_bytes() const;
  // forward_s, or where it was not recorded the usual 1:2 split of forward
  // and backward (a third of the compute), at most the first ready_s.
  double forward_or_estimate() const;
};

// Reads a workload document ("tensors" or "layers"); ConfigError naming the
// field on bad input.
Workload read_workload(const json::Value& doc);
Workload read_workload_file(const std::string& path);

// The workload as a "tensors" document read_workload() reads back.
std::string workload_json(const Workload& w);

// The workload with every compute time multiplied by `factor`.
Workload scaled_compute(Workload w, double factor);

}  // namespace cohort::sim
