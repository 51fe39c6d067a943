#include "tools/plan/profile.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "cohort/common/check.h"
#include "tools/sim/fields.h"

namespace cohort::plan {

using sim::Fields;
using sim::Range;

std::string relative_to(const std::string& document, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const size_t slash = document.find_last_of('/');
  return slash == std::string::npos ? path : document.substr(0, slash + 1) + path;
}

namespace {

// A workload field: a workload object, or the path of a workload file
// relative to the profile.
sim::Workload read_workload_field(const json::Value& w, const std::string& field, const std::string& path) {
  if (w.is_string()) return read_named_file<sim::Workload>(w, field, path, sim::read_workload_file);
  if (!w.is_object())
    sim::field_error(w, field, "expected a workload object or the path of a workload file (cohort-sim workload)");
  return sim::read_workload(w);
}

// The program's step as a run of it reports it (the period measured from
// its timeline, else its compute and update).
double step_period_s(const sim::Workload& w) {
  return w.measured_step_s > 0 ? w.measured_step_s : w.compute_end_s + w.update_s;
}

// A step's workload: "workload", or for a family "step_s", the period of
// that family's step measured as the program's was: the program's
// workload with every compute time scaled to it.
sim::Workload read_step_workload(Fields& f, const std::string& path, const Step* program) {
  if (!program) return read_workload_field(f.required("workload"), f.path("workload"), path);
  const json::Value* step_s = f.optional("step_s");
  const json::Value* workload = f.optional("workload");
  if (step_s && workload) sim::field_error(*step_s, f.path("step_s"), "give workload or step_s, not both");
  if (!step_s && !workload) sim::field_error(f.object(), f.path("workload"), "missing: give workload or step_s");
  if (workload) return read_workload_field(*workload, f.path("workload"), path);
  const double seconds = f.number("step_s", std::nullopt, Range::positive);
  return sim::scaled_compute(program->workload, seconds / step_period_s(program->workload));
}

// A step's fields, at the top level (`program` null) or in a family's
// object (errors name them by f's path: "families.ddp.workload"):
// workload or step_s, batch_per_rank (a family's defaults to the
// program's), compute_at.
Step read_step(Fields& f, const std::string& path, const Step* program) {
  Step s;
  s.workload = read_step_workload(f, path, program);
  s.batch_per_rank =
      f.number("batch_per_rank", program ? std::optional(program->batch_per_rank) : std::nullopt, Range::positive);
  if (const json::Value* at = f.optional("compute_at")) {
    // A second step at another batch: compute = fixed + per example x b,
    // through both points (clamped to what a step can be: a fixed part
    // between 0 and the profiled step's compute).
    Fields c(*at, f.path("compute_at"));
    const double b2 = c.number("batch_per_rank", std::nullopt, Range::positive);
    const sim::Workload second = read_step_workload(c, path, program);
    c.finish();
    if (b2 == s.batch_per_rank)
      sim::field_error(*at, c.path("batch_per_rank"),
                       "must differ from batch_per_rank (" + std::to_string(s.batch_per_rank) + ")");
    const double t1 = s.workload.compute_end_s, t2 = second.compute_end_s;
    const double per_example = (t2 - t1) / (b2 - s.batch_per_rank);
    s.fixed_compute_s = std::clamp(t1 - per_example * s.batch_per_rank, 0.0, t1);
  }
  return s;
}

}  // namespace

Profile read_profile(const json::Value& doc, const std::string& path) {
  Profile p;
  p.path = path;
  Fields f(doc, "");
  p.name = f.text("name", "model");
  p.step = read_step(f, path, nullptr);
  if (const json::Value* families = f.optional("families")) {
    Fields by_family(*families, "families");  // an object, or an error naming the field
    for (const auto& [family, value] : families->members()) {
      if (std::find_if(std::begin(kProfileFamilies), std::end(kProfileFamilies),
                       [&](const char* k) { return family == k; }) == std::end(kProfileFamilies)) {
        std::string known;
        for (const char* k : kProfileFamilies) known += std::string(known.empty() ? "" : ", ") + k;
        sim::field_error(value, by_family.path(family), "unknown strategy family (one of " + known + ")");
      }
      Fields step(value, by_family.path(family));
      p.family_steps[family] = read_step(step, path, &p.step);
      step.finish();
    }
  }
  if (const json::Value* shared = f.optional("shared")) {
    Fields sh(*shared, "shared");
    p.shared_ranks = int(sh.integer("ranks", std::nullopt, 2, 1 << 20));
    p.shared = read_step(sh, path, &p.step);
    sh.finish();
  }
  p.flop_per_example = f.number("flop_per_example", 0.0, Range::non_negative);
  p.program = f.text("program", p.program);
  {
    Fields m(f.required("memory"), "memory");
    p.parameter_bytes = m.number("parameter_bytes", p.step.workload.total_bytes(), Range::positive);
    p.gradient_bytes = m.number("gradient_bytes", p.parameter_bytes, Range::non_negative);
    const json::Value* absolute = m.optional("optimizer_bytes");
    const json::Value* relative = m.optional("optimizer_bytes_per_parameter_byte");
    if (absolute && relative)
      sim::field_error(*relative, "memory.optimizer_bytes_per_parameter_byte",
                       "give optimizer_bytes or optimizer_bytes_per_parameter_byte, not both");
    p.optimizer_bytes =
        absolute ? m.number("optimizer_bytes", 0.0, Range::non_negative)
                 : p.parameter_bytes * m.number("optimizer_bytes_per_parameter_byte", 0.0, Range::non_negative);
    p.activation_bytes_per_example = m.number("activation_bytes_per_example", std::nullopt, Range::non_negative);
    m.finish();
  }
  if (const json::Value* s = f.optional("stages")) {
    Fields st(*s, "stages");
    p.stages.layers = int(st.integer("layers", std::nullopt, 1, 1 << 20));
    p.stages.heads = int(st.integer("heads", 0, 0, 1 << 20));
    p.stages.boundary_bytes_per_example = st.number("boundary_bytes_per_example", std::nullopt, Range::non_negative);
    p.stages.tp_bytes_per_example = st.number("tp_bytes_per_example", std::nullopt, Range::non_negative);
    p.stages.tp_allreduces_per_layer = int(st.integer("tp_allreduces_per_layer", 4, 0, 1 << 10));
    p.stages.program = st.text("program", p.program);
    st.finish();
  }
  f.finish();
  return p;
}

double Profile::sharing_factor(int ranks, double examples) const {
  if (shared_ranks < 2 || ranks < 2) return 1;
  // Ranks do not speed each other up: a shared step measured shorter than
  // the program's alone is the machine's noise.
  const double full = std::max(1.0, shared.compute_s(examples) / step.compute_s(examples));
  return 1 + (full - 1) * double(std::min(ranks, shared_ranks) - 1) / double(shared_ranks - 1);
}

Profile read_profile_file(const std::string& path) { return read_profile(json::parse_file(path), path); }

}  // namespace cohort::plan
