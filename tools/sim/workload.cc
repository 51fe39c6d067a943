#include "tools/sim/workload.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "tools/sim/fields.h"

namespace cohort::sim {

double Workload::total_bytes() const {
  double b = 0;
  for (const Tensor& t : tensors) b += t.bytes;
  return b;
}

double Workload::forward_or_estimate() const {
  if (forward_s >= 0) return forward_s;
  double first = compute_end_s;
  for (const Tensor& t : tensors) first = std::min(first, t.ready_s);
  return std::min(first, compute_end_s / 3);
}

std::string unit_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

namespace {

void read_tensors(Fields& f, Workload& w) {
  const json::Value& list = f.required("tensors");
  if (!list.is_array() || list.items().empty())
    field_error(list, "tensors", "expected a non-empty array of {name, bytes, ready_s}");
  for (size_t i = 0; i < list.items().size(); ++i) {
    Fields t(list.items()[i], "tensors[" + std::to_string(i) + "]");
    Tensor x;
    x.name = t.text("name", std::nullopt);
    x.bytes = t.number("bytes", std::nullopt, Range::non_negative);
    x.ready_s = t.number("ready_s", std::nullopt, Range::non_negative);
    x.unit = t.text("unit", unit_of(x.name));
    t.finish();
    w.tensors.push_back(std::move(x));
  }
  const double last = std::max_element(w.tensors.begin(), w.tensors.end(), [](auto& a, auto& b) {
                        return a.ready_s < b.ready_s;
                      })->ready_s;
  w.compute_end_s = f.number("compute_end_s", last, Range::non_negative);
  if (w.compute_end_s < last)
    field_error(*f.optional("compute_end_s"), "compute_end_s",
                "must not be before the last tensor's ready_s (" + number_text(last) + ")");
  const double first = std::min_element(w.tensors.begin(), w.tensors.end(), [](auto& a, auto& b) {
                         return a.ready_s < b.ready_s;
                       })->ready_s;
  w.forward_s = f.number("forward_s", -1.0, Range::any);
  if (w.forward_s > first || (w.forward_s < 0 && w.forward_s != -1))
    field_error(*f.optional("forward_s"), "forward_s",
                "must be between 0 and the first tensor's ready_s (" + number_text(first) + "), or -1 (not recorded)");
}

// Layers in forward order; backward runs them last to first.
void read_layers(Fields& f, Workload& w) {
  const double forward = f.number("forward_s", std::nullopt, Range::non_negative);
  const double backward = f.number("backward_s", std::nullopt, Range::non_negative);
  const double bytes_per_param = f.number("bytes_per_param", 4.0, Range::positive);
  const json::Value& list = f.required("layers");
  if (!list.is_array() || list.items().empty())
    field_error(list, "layers", "expected a non-empty array of {name, params, backward_weight}");
  struct Layer {
    std::string name;
    std::vector<double> params;
    double weight;
  };
  std::vector<Layer> layers;
  double total_weight = 0;
  for (size_t i = 0; i < list.items().size(); ++i) {
    const std::string path = "layers[" + std::to_string(i) + "]";
    Fields l(list.items()[i], path);
    Layer x;
    x.name = l.text("name", std::nullopt);
    const json::Value& p = l.required("params");
    // One tensor (a number) or several (an array: weight, bias, ...).
    if (p.is_number()) {
      x.params.push_back(l.number("params", std::nullopt, Range::non_negative));
    } else if (p.is_array()) {
      for (size_t j = 0; j < p.items().size(); ++j) {
        const json::Value& e = p.items()[j];
        if (!e.is_number() || e.number() < 0)
          field_error(e, path + ".params[" + std::to_string(j) + "]", "expected a non-negative number");
        x.params.push_back(e.number());
      }
    } else {
      field_error(p, path + ".params", "expected a number or an array of numbers");
    }
    x.weight = l.number("backward_weight", 1.0, Range::non_negative);
    l.finish();
    total_weight += x.weight;
    layers.push_back(std::move(x));
  }
  if (!(total_weight > 0)) field_error(list, "layers", "the backward_weight values sum to zero");
  double done = 0;
  for (size_t i = layers.size(); i-- > 0;) {
    done += layers[i].weight;
    const double ready = forward + backward * done / total_weight;
    for (size_t j = 0; j < layers[i].params.size(); ++j) {
      const std::string name = layers[i].params.size() == 1 ? layers[i].name : layers[i].name + "." + std::to_string(j);
      w.tensors.push_back({name, layers[i].params[j] * bytes_per_param, ready, layers[i].name});
    }
  }
  w.compute_end_s = forward + backward;
  w.forward_s = forward;
  w.element_bytes = bytes_per_param;
}

}  // namespace

Workload read_workload(const json::Value& doc) {
  Workload w;
  Fields f(doc, "");
  w.name = f.text("name", "workload");
  w.source = f.text("source", "");
  const bool has_tensors = doc.find("tensors") != nullptr;
  const bool has_layers = doc.find("layers") != nullptr;
  if (has_tensors == has_layers)
    field_error(doc, "", "give exactly one of 'tensors' (recorded ready times) or 'layers' (a model description)");
  if (has_tensors) {
    read_tensors(f, w);
    w.ordered = f.flag("ordered", false);
    w.element_bytes = f.number("element_bytes", 4.0, Range::positive);
  } else {
    read_layers(f, w);
  }
  w.update_s = f.number("update_s", 0.0, Range::non_negative);
  w.threads = static_cast<int>(f.integer("threads", 1, 1, 1 << 12));
  w.measured_step_s = f.number("measured_step_s", 0.0, Range::non_negative);
  w.measured_wake_s = f.number("measured_wake_s", 0.0, Range::non_negative);
  if (const json::Value* list = f.optional("step_periods_s")) {
    if (!list->is_array()) field_error(*list, "step_periods_s", "expected an array of step periods in seconds");
    for (size_t i = 0; i < list->items().size(); ++i) {
      const json::Value& v = list->items()[i];
      if (!v.is_number() || !(v.number() > 0))
        field_error(v, "step_periods_s[" + std::to_string(i) + "]", "expected a positive number of seconds");
      w.step_periods_s.push_back(v.number());
    }
  }
  f.finish();
  std::set<std::string> names;
  for (size_t i = 0; i < w.tensors.size(); ++i)
    if (!names.insert(w.tensors[i].name).second)
      field_error(doc, (has_tensors ? "tensors[" : "layers: tensor ") + std::to_string(i) + (has_tensors ? "].name" : ""),
                  "name '" + w.tensors[i].name + "' appears twice");
  std::stable_sort(w.tensors.begin(), w.tensors.end(), [](const Tensor& a, const Tensor& b) { return a.ready_s < b.ready_s; });
  return w;
}

Workload read_workload_file(const std::string& path) { return read_workload(json::parse_file(path)); }

std::string workload_json(const Workload& w) {
  std::ostringstream os;
  os.precision(9);
  os << "{\n  \"name\": \"" << json::escape(w.name) << "\",\n";
  if (!w.source.empty()) os << "  \"source\": \"" << json::escape(w.source) << "\",\n";
  os << "  \"ordered\": " << (w.ordered ? "true" : "false") << ",\n  \"element_bytes\": " << w.element_bytes
     << ",\n  \"threads\": " << w.threads << ",\n  \"update_s\": " << w.update_s
     << ",\n  \"compute_end_s\": " << w.compute_end_s << ",\n";
  if (w.measured_step_s > 0) os << "  \"measured_step_s\": " << w.measured_step_s << ",\n";
  if (w.measured_wake_s > 0) os << "  \"measured_wake_s\": " << w.measured_wake_s << ",\n";
  if (!w.step_periods_s.empty()) {
    os << "  \"step_periods_s\": [";
    for (size_t i = 0; i < w.step_periods_s.size(); ++i) os << (i ? ", " : "") << w.step_periods_s[i];
    os << "],\n";
  }
  if (w.forward_s >= 0) os << "  \"forward_s\": " << w.forward_s << ",\n";
  os << "  \"tensors\": [\n";
  for (size_t i = 0; i < w.tensors.size(); ++i)
    os << "    {\"name\": \"" << json::escape(w.tensors[i].name) << "\", \"bytes\": " << w.tensors[i].bytes
       << ", \"ready_s\": " << w.tensors[i].ready_s
       << (w.tensors[i].unit == unit_of(w.tensors[i].name) ? "" : ", \"unit\": \"" + json::escape(w.tensors[i].unit) + "\"")
       << "}" << (i + 1 < w.tensors.size() ? "," : "") << "\n";
  os << "  ]\n}\n";
  return os.str();
}

Workload scaled_compute(Workload w, double factor) {
  for (Tensor& t : w.tensors) t.ready_s *= factor;
  w.compute_end_s *= factor;
  w.update_s *= factor;
  if (w.forward_s > 0) w.forward_s *= factor;
  return w;
}

}  // namespace cohort::sim
