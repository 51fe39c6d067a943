#include "tools/plan/profile.h"

#include <algorithm>

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

Profile read_profile(const json::Value& doc, const std::string& path) {
  Profile p;
  p.path = path;
  Fields f(doc, "");
  p.name = f.text("name", "model");
  const json::Value& w = f.required("workload");
  if (w.is_string()) {
    p.workload = read_named_file<sim::Workload>(w, "workload", path, sim::read_workload_file);
  } else if (w.is_object()) {
    p.workload = sim::read_workload(w);
  } else {
    sim::field_error(w, "workload", "expected a workload object or the path of a workload file (cohort-sim workload)");
  }
  p.batch_per_rank = f.number("batch_per_rank", std::nullopt, Range::positive);
  if (const json::Value* at = f.optional("compute_at")) {
    // A second step at another batch: compute = fixed + per example x b,
    // through both points (clamped to what a step can be: a fixed part
    // between 0 and the profiled step's compute).
    Fields c(*at, "compute_at");
    const double b2 = c.number("batch_per_rank", std::nullopt, Range::positive);
    const json::Value& w2 = c.required("workload");
    const sim::Workload second =
        w2.is_string() ? read_named_file<sim::Workload>(w2, "compute_at.workload", path, sim::read_workload_file)
                       : sim::read_workload(w2);
    c.finish();
    if (b2 == p.batch_per_rank)
      sim::field_error(*at, "compute_at.batch_per_rank",
                       "must differ from batch_per_rank (" + std::to_string(p.batch_per_rank) + ")");
    const double t1 = p.workload.compute_end_s, t2 = second.compute_end_s;
    const double per_example = (t2 - t1) / (b2 - p.batch_per_rank);
    p.fixed_compute_s = std::clamp(t1 - per_example * p.batch_per_rank, 0.0, t1);
  }
  p.flop_per_example = f.number("flop_per_example", 0.0, Range::non_negative);
  p.program = f.text("program", p.program);
  {
    Fields m(f.required("memory"), "memory");
    p.parameter_bytes = m.number("parameter_bytes", p.workload.total_bytes(), Range::positive);
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

Profile read_profile_file(const std::string& path) { return read_profile(json::parse_file(path), path); }

}  // namespace cohort::plan
