#include "cohort/dashboard/status.h"

#include <charconv>
#include <cmath>

#include "cohort/common/json_object.h"

namespace cohort::dashboard {
namespace {

// Numbers of the point arrays, the bulk of the document at 64 ranks: the
// shortest text that reads back the same float (to_chars), non-finite as
// null like JsonObject.
void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buffer[32];
  // Six significant digits are plenty for a chart and keep the document small.
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, float(v));
  out.append(buffer, ec == std::errc() ? end : buffer);
}

std::string points_json(const std::vector<Point>& points) {
  std::string out;
  out.reserve(points.size() * 16 + 2);
  out += '[';
  for (size_t i = 0; i < points.size(); ++i) {
    if (i) out += ',';
    out += '[';
    append_number(out, points[i].x);
    out += ',';
    append_number(out, points[i].y);
    out += ']';
  }
  out += ']';
  return out;
}

std::string rank_json(const RankStatus& r) {
  const std::string time = JsonObject()
                               .add("compute_ms", r.time.compute_ms, 9)
                               .add("wait_ms", r.time.wait_ms, 9)
                               .add("input_ms", r.time.input_ms, 9)
                               .add("checkpoint_ms", r.time.checkpoint_ms, 9)
                               .add("other_ms", r.time.other_ms, 9)
                               .str();
  return JsonObject()
      .add("rank", r.rank)
      .add("host", r.host)
      .add("pid", r.pid)
      .add("ended", r.ended)
      .add("heartbeat_age_s", r.heartbeat_age_s, 4)
      .add_raw("sample", r.sample ? telemetry::to_json(*r.sample) : "null")
      .add_raw("time", time)
      .add_raw("step_ms", points_json(r.step_ms))
      .str();
}

}  // namespace

const char* phase_name(JobPhase phase) {
  switch (phase) {
    case JobPhase::starting: return "starting";
    case JobPhase::running: return "running";
    case JobPhase::finished: return "finished";
    case JobPhase::failed: return "failed";
  }
  return "?";
}

std::string to_json(const Status& s) {
  std::string ranks = "[";
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    if (i) ranks += ',';
    ranks += rank_json(s.ranks[i]);
  }
  ranks += ']';
  JsonObject metrics;
  for (const MetricStatus& m : s.metrics) metrics.add_raw(m.name, points_json(m.points));
  std::string events = "[";
  for (size_t i = 0; i < s.events.size(); ++i) {
    if (i) events += ',';
    events += telemetry::to_json(s.events[i]);
  }
  events += ']';
  return JsonObject()
      .add("schema", kStatusSchema)
      .add("unix_time_s", s.unix_time_s, 17)
      .add("state", phase_name(s.phase))
      .add("failure", s.failure)
      .add_raw("job", s.job ? telemetry::to_json(*s.job) : "null")
      .add_raw("straggler", s.straggler ? telemetry::to_json(*s.straggler) : "null")
      .add_raw("ranks", ranks)
      .add("epochs", s.epochs)
      .add_raw("last_epoch", s.last_epoch ? telemetry::to_json(*s.last_epoch) : "null")
      .add_raw("metrics", metrics.str())
      .add_raw("events", events)
      .add("events_total", s.events_total)
      .str();
}

}  // namespace cohort::dashboard
