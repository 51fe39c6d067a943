#include "tools/sim/timeline_workload.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <numeric>

#include "cohort/common/check.h"
#include "cohort/common/stats.h"
#include "tools/sim/fields.h"

namespace cohort::sim {
namespace {

struct Event {
  std::string lane;
  double bytes = 0;
  double submitted = 0, completed = 0;  // seconds
  double queued = 0;                    // its QUEUE phase: submitted -> picked up by a cycle
};

std::vector<Event> allreduces(const json::Value& trace) {
  // Chrome's JSON array format, or the object format with "traceEvents".
  const json::Value* events = &trace;
  if (trace.is_object()) {
    events = trace.find("traceEvents");
    if (!events) field_error(trace, "traceEvents", "not a Chrome trace: no traceEvents array");
  }
  if (!events->is_array()) field_error(*events, "", "not a Chrome trace: expected an array of events");
  std::map<std::pair<int64_t, int64_t>, std::string> lanes;  // (pid, tid) -> thread_name
  std::map<std::tuple<int64_t, int64_t, double>, double> queue;  // (pid, tid, ts) -> QUEUE dur
  for (const json::Value& e : events->items()) {
    if (!e.is_object()) field_error(e, "event", "expected an object");
    const json::Value* ph = e.find("ph");
    const json::Value* name = e.find("name");
    if (ph && ph->is_string() && ph->string() == "X" && name && name->is_string() && name->string() == "QUEUE") {
      const json::Value *pid = e.find("pid"), *tid = e.find("tid"), *ts = e.find("ts"), *dur = e.find("dur");
      if (pid && tid && ts && dur && pid->is_number() && tid->is_number() && ts->is_number() && dur->is_number())
        queue[{int64_t(pid->number()), int64_t(tid->number()), ts->number()}] = dur->number() * 1e-6;
    }
    if (ph && ph->is_string() && ph->string() == "M" && name && name->is_string() && name->string() == "thread_name") {
      const json::Value* args = e.find("args");
      const json::Value* lane = args ? args->find("name") : nullptr;
      if (lane && lane->is_string())
        lanes[{int64_t(e.at("pid").number()), int64_t(e.at("tid").number())}] = lane->string();
    }
  }
  std::vector<Event> out;
  for (size_t i = 0; i < events->items().size(); ++i) {
    const json::Value& e = events->items()[i];
    const json::Value* ph = e.find("ph");
    const json::Value* name = e.find("name");
    if (!ph || !ph->is_string() || ph->string() != "X" || !name || !name->is_string() || name->string() != "ALLREDUCE")
      continue;
    const std::string path = "event " + std::to_string(i);
    Fields f(e, path);
    Event x;
    const int64_t pid = f.integer("pid", std::nullopt, INT32_MIN, INT32_MAX);
    const int64_t tid = f.integer("tid", std::nullopt, INT32_MIN, INT32_MAX);
    const double ts = f.number("ts", std::nullopt, Range::any);
    x.submitted = ts * 1e-6;
    if (auto q = queue.find({pid, tid, ts}); q != queue.end()) x.queued = q->second;
    x.completed = x.submitted + f.number("dur", std::nullopt, Range::non_negative) * 1e-6;
    Fields args(f.required("args"), path + ".args");
    x.bytes = args.number("bytes", std::nullopt, Range::non_negative);
    if (args.optional("failed")) field_error(e, path, "a failed allreduce: the run did not train normally");
    auto it = lanes.find({pid, tid});
    if (it == lanes.end()) field_error(e, path, "no thread_name names its lane (tid " + std::to_string(tid) + ")");
    x.lane = it->second;
    out.push_back(std::move(x));
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) { return a.submitted < b.submitted; });
  return out;
}

}  // namespace

Workload workload_from_timeline(const json::Value& trace, const std::string& source, const std::string& first_op) {
  const std::vector<Event> ev = allreduces(trace);
  const size_t n = ev.size();
  COHORT_CHECK_AS(ConfigError, n > 0) << source << ": the timeline has no ALLREDUCE events";
  auto same = [&](size_t i, size_t j) { return ev[i].lane == ev[j].lane && ev[i].bytes == ev[j].bytes; };

  // The smallest period the last two periods repeat with, after leaving out
  // the fewest trailing ops that do not repeat (a program's own reductions
  // after training: timings, a final loss).
  size_t period = 0, end = n;
  for (size_t trim = 0; period == 0 && 3 * (trim + 1) <= n; ++trim) {
    end = n - trim;
    for (size_t p = 1; 3 * p <= end && period == 0; ++p) {
      bool ok = true;
      for (size_t i = end - 2 * p; i < end && ok; ++i) ok = same(i, i - p);
      if (ok) period = p;
    }
  }
  COHORT_CHECK_AS(ConfigError, period > 0)
      << source << ": no repeating training step in " << n
      << " allreduces (need at least three steps with the same tensors in the same order)";
  // How far back the repetition goes.
  size_t begin = end - 2 * period;
  while (begin > 0 && same(begin - 1, begin - 1 + period)) --begin;

  // done_before[i]: when every op submitted before op i had completed; the
  // wait before a submission is the time since then.
  std::vector<double> done_before(n, -1e300), wait(n, 0);
  for (size_t i = 1; i < n; ++i) {
    done_before[i] = std::max(done_before[i - 1], ev[i - 1].completed);
    wait[i] = ev[i].submitted - done_before[i];
  }
  size_t phase = 0;
  double best = -1;
  if (!first_op.empty()) {
    size_t ph = 0;
    while (ph < period && ev[begin + ph].lane != first_op) ++ph;
    COHORT_CHECK_AS(ConfigError, ph < period)
        << source << ": no op '" << first_op << "' among the " << period << " of a step";
    phase = ph;
    best = 0;
  }
  for (size_t ph = 0; ph < period && first_op.empty(); ++ph) {
    std::vector<double> w;
    for (size_t i = begin + ph; i < end; i += period)
      if (i > 0) w.push_back(wait[i]);
    if (w.empty()) continue;
    const double m = median(w);
    if (m > best) {
      best = m;
      phase = ph;
    }
  }
  // Steps: [s, s + period) for s = begin + phase + k * period.
  std::vector<size_t> starts;
  for (size_t s = begin + phase; s + period <= end; s += period) starts.push_back(s);
  COHORT_CHECK_AS(ConfigError, starts.size() >= 3)
      << source << ": only " << starts.size() << " full steps of " << period
      << " allreduces repeat; run more steps (at least 4)";
  // The first quarter of the steps (at least one, which has no previous
  // step inside the repetition) warm up allocators, caches and the engine's
  // response cache: the steady steps are the rest.
  const size_t warm_up = std::max<size_t>(1, (starts.size() + 3) / 4);
  std::vector<std::vector<double>> offsets(period);
  std::vector<double> periods, first_queue;
  for (size_t k = warm_up; k < starts.size(); ++k) {
    const size_t s = starts[k];
    const double origin = done_before[s];
    for (size_t i = 0; i < period; ++i) offsets[i].push_back(std::max(0.0, ev[s + i].submitted - origin));
    periods.push_back(ev[s].submitted - ev[starts[k - 1]].submitted);
    first_queue.push_back(ev[s].queued);
  }
  Workload w;
  w.source = source;
  w.ordered = ev[starts[0]].lane == "ordered";
  w.measured_step_s = median(periods);
  w.measured_wake_s = median(first_queue);
  w.step_periods_s = periods;
  for (size_t i = 0; i < period; ++i) {
    const Event& e = ev[starts[0] + i];
    std::string name = w.ordered ? "bucket." + std::to_string(i) : e.lane;
    w.tensors.push_back({std::move(name), e.bytes, median(offsets[i])});
    if (w.ordered) continue;
    for (size_t j = 0; j + 1 < w.tensors.size(); ++j) {
      COHORT_CHECK_AS(ConfigError, w.tensors[j].name != w.tensors.back().name)
          << source << ": op '" << e.lane << "' runs twice within one step; not a data-parallel training step";
    }
  }
  std::stable_sort(w.tensors.begin(), w.tensors.end(), [](const Tensor& a, const Tensor& b) { return a.ready_s < b.ready_s; });
  w.compute_end_s = w.tensors.back().ready_s;
  return w;
}

Workload workload_from_timeline_file(const std::string& path, const std::string& first_op) {
  return workload_from_timeline(json::parse_file(path), path, first_op);
}

}  // namespace cohort::sim
