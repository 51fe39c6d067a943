// Profile: what cohort-plan knows of the user's program, from a one-rank
// run: its step (a cohort-sim workload: gradients' sizes and ready times),
// the batch that step was measured at, optionally the step under each
// strategy family, and its memory (format in tools/plan/README.md).
#pragma once

#include <fstream>
#include <map>
#include <string>

#include "tools/sim/fields.h"
#include "tools/sim/workload.h"

namespace cohort::plan {

// The model's stages, for the dp x pp x tp mesh (a model that declares
// them can be split into pipeline stages and tensor-parallel layers).
struct Stages {
  int layers = 0;                         // 0: the model declares none (no mesh plans)
  int heads = 0;                          // tp must divide it (0: any tp)
  double boundary_bytes_per_example = 0;  // activations between two stages, one example
  double tp_bytes_per_example = 0;        // one tensor-parallel allreduce, one example
  int tp_allreduces_per_layer = 4;
  std::string program;  // the program that runs a mesh (char_lm's --dp/--pp/--tp flags)
};

// One measured step of the program: its workload at `batch_per_rank`
// examples on the profiled machine, and how its compute grows with the
// examples.
struct Step {
  sim::Workload workload;     // one step at `batch_per_rank` examples on the profiled machine
  double batch_per_rank = 1;  // examples in that step
  // The part of the step's compute that does not grow with the batch (the
  // weights' traffic of a wide layer at a small batch), from a second step
  // measured at another batch ("compute_at"); 0 without one: the compute
  // is taken to scale with the examples.
  double fixed_compute_s = 0;

  // The profiled machine's compute of a step of `examples` per rank: the
  // fixed part plus the rest in proportion to the examples.
  double compute_s(double examples) const {
    return fixed_compute_s + (workload.compute_end_s - fixed_compute_s) * examples / batch_per_rank;
  }
};

struct Profile {
  std::string name;
  std::string path;  // the profile file (errors, relative paths)
  Step step;         // the program's step, for every family without one of its own
  // Steps measured under one strategy family ("families": "ddp", "zero",
  // ...): what that family's own work costs (its gradient hooks and
  // buckets, a sharded optimizer) beside the same model's compute.
  std::map<std::string, Step> family_steps;
  // The program's step on one rank while `shared_ranks` copies of that
  // one-rank run ran at once on one machine of the profiled type
  // ("shared"; shared_ranks 0: not measured): what a rank loses to the
  // other ranks on its machine (memory bandwidth, caches, and cores no
  // longer free to absorb the system's other work), and its jitter then.
  Step shared;
  int shared_ranks = 0;
  double flop_per_example = 0;  // 0: unknown (machine types then need compute_speedup)
  double parameter_bytes = 0;   // default: the workload's gradient bytes
  double gradient_bytes = 0;    // default: parameter_bytes
  double optimizer_bytes = 0;   // the optimizer's state, whole model
  double activation_bytes_per_example = 0;
  std::string program = "./train";  // what follows cohortrun's flags in the command
  Stages stages;

  // The step a plan of `family` (planner.h's family names) runs: its own
  // where the profile has one, else the program's.
  const Step& step_of(const std::string& family) const {
    const auto it = family_steps.find(family);
    return it == family_steps.end() ? step : it->second;
  }

  // How many times longer a rank's compute of `examples` takes with `ranks`
  // ranks on its machine's cores than alone: 1 for one rank or without
  // "shared"; the shared step over the program's (at least 1) from
  // shared_ranks ranks on (more ranks than cores: the simulator's sharing
  // of the cores adds the rest), in proportion to the ranks in between.
  double sharing_factor(int ranks, double examples) const;
};

// The families a profile may give steps for.
inline constexpr const char* kProfileFamilies[] = {"one_device", "horovod", "ddp", "zero", "parameter_server", "mesh"};

// Reads a profile file; ConfigError naming the file, the field and what was
// expected. "workload" is a workload object or a path (relative to the
// profile's folder).
Profile read_profile_file(const std::string& path);
Profile read_profile(const json::Value& doc, const std::string& path);

// A path in a document, relative to the document's folder.
std::string relative_to(const std::string& document, const std::string& path);

// read(the file a document's string field names, relative to the
// document); a file that cannot be read is a ConfigError at that field
// ("<where>: <field>: cannot open ...").
template <typename T>
T read_named_file(const json::Value& at, const std::string& field, const std::string& document,
                  T (*read)(const std::string&)) {
  const std::string file = relative_to(document, at.string());
  if (!std::ifstream(file).good())
    sim::field_error(at, field, "cannot read '" + file + "' (a path relative to " + document + ")");
  return read(file);
}

}  // namespace cohort::plan
