// A workload recovered from a real run's timeline (COHORT_TIMELINE: the
// Chrome trace cohort/engine/timeline.h writes on rank 0 of an engine).
//
// The trace's allreduces (complete events named ALLREDUCE on each op's lane:
// ts = submitted, ts + dur = completed, args.bytes) are sorted by submission.
// Their (lane, bytes) sequence repeats once per training step: the period P
// is the smallest one the last steps repeat with (named ops: every parameter
// once; DDP: the buckets, lane "ordered"), once the fewest trailing ops that
// do not repeat are left out (the program's own reductions after training).
// The step boundary within the
// period is before `first_op` when given (the lane of the step's first
// gradient, e.g. "grad/5.bias" for the last layer's bias), else where the wait
// before a submission (the time since every earlier op completed) is longest
// in the median: usually the forward pass, but a model whose largest layer's
// backward takes longer than the forward pass needs `first_op`. Each step starts
// when every op of the step before it has completed; an op's ready_s is its
// median offset from there over the steady steps (the first quarter of the
// steps, at least one, left out as warm-up). Lane "ordered" makes the
// workload ordered (DDP buckets).
//
// Run the program with one rank to get compute times free of communication;
// the steady steps' median period is kept as measured_step_s, and each of
// their periods in step_periods_s (the jitter a synchronous job waits for,
// jitter.h).
//
// ConfigError when the trace is not a timeline, has no allreduce, or no
// repeating step with at least two full periods.
#pragma once

#include <string>

#include "cohort/common/json.h"
#include "tools/sim/workload.h"

namespace cohort::sim {

Workload workload_from_timeline(const json::Value& trace, const std::string& source,
                                const std::string& first_op = {});
Workload workload_from_timeline_file(const std::string& path, const std::string& first_op = {});

}  // namespace cohort::sim
