// The dp x pp x tp mesh (cohort/torch/model_parallel): pipeline stages with
// micro-batches, tensor-parallel layers, data-parallel replicas, as one
// step's time on a Topology. What simulate() does not model of a mesh is
// modelled here in closed form; the data-parallel gradient sync is
// simulate()'s own (the engine, its collectives) on the sub-topology of one
// dp group.
//
// Rank order (Megatron-LM's, and cohort::Mesh's): tp fastest, then dp, then
// pp, ranks filling hosts in order. So a tp group lies inside one host
// (tp must divide ranks_per_host), a dp group takes ranks_per_host / tp
// ranks of a host (or dp, if fewer), and adjacent stages are on other hosts
// once tp * dp >= ranks_per_host.
//
// One step of one replica, its batch of B_r examples cut into m
// micro-batches of B_r / m:
//   slot   = compute / (m pp tp) + tp_part + p2p_part      (one stage, one micro-batch, fwd + bwd)
//   tp_part  = layers / pp * allreduces_per_layer * allreduce(tp ranks, ring over `intra`,
//              tp_bytes_per_example * B_r / m)
//   p2p_part = 2 link.time(boundary_bytes_per_example * B_r / m / tp)   (forward activations out, their
//              gradients back; each tp rank sends its 1/tp, Megatron's scatter/gather; `intra` inside a
//              host, else the NIC shared by the host's ranks)
//   pipeline = (m + pp - 1) * slot, of which the bubble (pp - 1) * slot: bubble fraction
//              (pp - 1) / (m + pp - 1), GPipe's and 1F1B's alike (1F1B keeps fewer micro-batches in
//              flight: min(m, pp) against m, a memory difference)
// then the stage's gradients (the model's 1 / (pp tp)) are averaged over dp
// after the last micro-batch, as char_lm and Megatron do (no overlap):
// simulate() on a topology of dp ranks, ranks_per_host / tp per host (or
// dp, if fewer), the NIC's bandwidth split by tp (a host whose dp group
// spans hosts holds ranks of one stage only: tp dp groups, one per position
// in a tp group, of ranks_per_host / tp ranks each, sharing its NIC), with
// the workload's tensors scaled by 1 / (pp tp) all ready at the pipeline's
// end; the cores' sharing is the slot's (simulate() adds none).
#pragma once

#include "tools/sim/simulator.h"

namespace cohort::sim {

enum class PipelineSchedule { gpipe, one_f_one_b };
const char* pipeline_schedule_name(PipelineSchedule s);  // "gpipe", "1f1b"

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int ranks() const { return dp * pp * tp; }
};

// The model's side of a mesh, for one replica's batch.
struct MeshModel {
  int layers = 1;                   // split evenly over pp
  double compute_s = 0;             // fwd + bwd of the replica's batch on one rank, all layers
  double update_s = 0;              // the optimizer's update of the whole model on one rank
  double boundary_bytes = 0;        // activations crossing a stage boundary, replica batch, one way
  double tp_bytes = 0;              // one tensor-parallel allreduce, replica batch
  int tp_allreduces_per_layer = 4;  // Megatron: 2 forward (attention, MLP) + 2 backward
};

// Micro-batches a stage keeps activations of at its peak: m (GPipe) or
// min(m, pp) (1F1B, the first stage).
int micro_batches_in_flight(const MeshShape& shape);

struct MeshPrediction {
  double step_s = 0;
  double slot_s = 0;        // one stage, one micro-batch, forward and backward
  double compute_s = 0;     // the step's compute: m * compute part of the slot
  double bubble_s = 0;      // (pp - 1) * slot
  double tp_s = 0;          // tensor-parallel allreduces per step (on the critical path)
  double p2p_s = 0;         // stage-to-stage transfers per step (critical path)
  double pipeline_s = 0;    // (m + pp - 1) * slot
  double dp_exposed_s = 0;  // the dp gradient sync and update after the pipeline
  bool p2p_across_hosts = false;
  bool dp_across_hosts = false;  // a dp group spans hosts (its sync crosses the NIC)
};

// The step of `shape` on `topology` (hosts x ranks_per_host = shape.ranks()).
// `gradients` is the whole model's workload (its tensors' bytes; times are
// ignored), `dp_strategy` the engine's strategy on the dp axis (ddp, or
// zero stages 1-2). ConfigError when the shape does not fit the topology
// (tp not dividing ranks_per_host, ranks differing).
MeshPrediction predict_mesh(const Topology& topology, const Workload& gradients, const MeshModel& model,
                            const MeshShape& shape, const Strategy& dp_strategy, const SimOptions& options = {});

}  // namespace cohort::sim
