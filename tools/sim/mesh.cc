#include "tools/sim/mesh.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "tools/sim/collectives.h"

namespace cohort::sim {

const char* pipeline_schedule_name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }

int micro_batches_in_flight(const MeshShape& shape) {
  return shape.schedule == PipelineSchedule::gpipe ? shape.micro_batches : std::min(shape.micro_batches, shape.pp);
}

namespace {

// How much slower a rank computes with `runnable` compute threads on its
// machine than alone (simulate()'s processor sharing of the cores).
double contention(const Topology& t, double threads, double runnable) {
  return core_share(t, threads) / core_share(t, runnable);
}

}  // namespace

MeshPrediction predict_mesh(const Topology& t, const Workload& gradients, const MeshModel& model,
                            const MeshShape& shape, const Strategy& dp_strategy, const SimOptions& options) {
  COHORT_CHECK_AS(ConfigError, shape.dp >= 1 && shape.pp >= 1 && shape.tp >= 1 && shape.micro_batches >= 1)
      << "a mesh needs dp, pp, tp and micro-batches of at least 1";
  COHORT_CHECK_AS(ConfigError, shape.ranks() == t.ranks())
      << "the mesh dp " << shape.dp << " x pp " << shape.pp << " x tp " << shape.tp << " is " << shape.ranks()
      << " ranks, the topology has " << t.ranks();
  COHORT_CHECK_AS(ConfigError, t.ranks_per_host % shape.tp == 0)
      << "tp " << shape.tp << " must divide the " << t.ranks_per_host << " ranks per host (a tp group stays in a host)";
  COHORT_CHECK_AS(ConfigError, shape.pp <= model.layers)
      << "pp " << shape.pp << " is more stages than the model's " << model.layers << " layers";
  COHORT_CHECK_AS(ConfigError, dp_strategy.mode == Mode::ddp || dp_strategy.mode == Mode::zero)
      << "a mesh averages its dp gradients with ddp or zero (stages 1-2)";

  const double m = shape.micro_batches;
  const int R = t.ranks_per_host;
  MeshPrediction p;

  const double slowdown = contention(t, gradients.threads, double(t.ranks_per_machine()) * gradients.threads);
  const double compute_slot = model.compute_s * slowdown / (m * shape.pp * shape.tp);

  // Tensor parallelism: a ring over the host's point-to-point link.
  double tp_slot = 0;
  if (shape.tp > 1) {
    Topology group = t;
    group.hosts = 1;
    group.ranks_per_host = shape.tp;
    group.stragglers.clear();
    const double per_layer =
        model.tp_allreduces_per_layer * allreduce_cost(group, Algorithm::ring, model.tp_bytes / m).seconds;
    tp_slot = per_layer * double(model.layers) / shape.pp;
  }

  // Stage boundaries: inside a host while a stage's tp x dp ranks do not
  // fill it; else every rank of the host sends its share through the NIC.
  double p2p_slot = 0;
  if (shape.pp > 1) {
    const double bytes = model.boundary_bytes / m / shape.tp;
    p.p2p_across_hosts = shape.tp * shape.dp >= R && t.hosts > 1;
    p2p_slot = 2 * (p.p2p_across_hosts ? t.network.alpha_s + R * bytes / t.network.bytes_per_s : t.intra.time(bytes));
  }

  p.slot_s = compute_slot + tp_slot + p2p_slot;
  p.pipeline_s = (m + shape.pp - 1) * p.slot_s;
  p.bubble_s = (shape.pp - 1) * p.slot_s;
  p.compute_s = m * compute_slot;
  p.tp_s = (m + shape.pp - 1) * tp_slot;
  p.p2p_s = (m + shape.pp - 1) * p2p_slot;

  // The dp gradient sync after the pipeline: simulate() on one dp group.
  const double share = 1.0 / (double(shape.pp) * shape.tp);
  Workload stage;
  stage.name = gradients.name + " (one stage, one tp shard)";
  stage.threads = gradients.threads;
  stage.element_bytes = gradients.element_bytes;
  for (const Tensor& x : gradients.tensors) {
    Tensor s = x;
    s.bytes = x.bytes * share;
    s.ready_s = p.pipeline_s;
    stage.tensors.push_back(s);
  }
  stage.compute_end_s = p.pipeline_s;
  stage.forward_s = p.pipeline_s / 3;
  stage.update_s = model.update_s * share * slowdown;
  if (shape.dp == 1) {
    p.step_s = p.pipeline_s + stage.update_s;
  } else {
    Topology group = t;
    const int per_host = std::min(shape.dp, R / shape.tp);
    group.ranks_per_host = per_host;
    group.hosts = (shape.dp + per_host - 1) / per_host;
    // A host whose dp group spans hosts holds one stage: tp dp groups (one
    // per position in a tp group) of R / tp ranks each, sharing its NIC.
    group.network.bytes_per_s = t.network.bytes_per_s / shape.tp;
    group.cores_per_host = 0;  // compute's sharing of the cores is in the slot already
    group.one_machine = false;
    group.stragglers.clear();
    p.dp_across_hosts = group.hosts > 1;
    p.step_s = simulate(group, stage, dp_strategy, options).step_s;
  }
  p.dp_exposed_s = p.step_s - p.pipeline_s;
  return p;
}

}  // namespace cohort::sim
