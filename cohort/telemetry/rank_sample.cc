#include "cohort/telemetry/rank_sample.h"

#include <unistd.h>

#include <cstdio>

#include "cohort/common/json.h"
#include "cohort/common/json_object.h"

namespace cohort::telemetry {

std::string to_json(const RankSample& s) {
  return JsonObject()
      .add("rank", s.rank)
      .add("size", s.size)
      .add("membership_epoch", s.membership_epoch)
      .add("host", s.host)
      .add("pid", s.pid)
      .add("epoch", s.epoch)
      .add("step", s.step)
      .add("unix_time_s", s.unix_time_s, 17)
      .add("window_steps", s.window_steps)
      .add("step_ms", s.step_ms, 9)
      .add("compute_ms", s.compute_ms, 9)
      .add("peer_wait_ms", s.peer_wait_ms, 9)
      .add("transfer_ms", s.transfer_ms, 9)
      .add("input_ms", s.input_ms, 9)
      .add("checkpoint_ms", s.checkpoint_ms, 9)
      .add("other_ms", s.other_ms, 9)
      .add("samples_per_s", s.samples_per_s, 9)
      .add("rss_bytes", s.rss_bytes)
      .str();
}

RankSample rank_sample_from_json(std::string_view text, std::string_view source) {
  const json::Value v = json::parse(text, source);
  auto integer = [&](const char* key) { return static_cast<int64_t>(v.at(key).number()); };
  // A non-finite figure was written as null: read it back as 0.
  auto figure = [&](const char* key) { return v.at(key).is_null() ? 0.0 : v.at(key).number(); };
  RankSample s;
  s.rank = static_cast<int>(integer("rank"));
  s.size = static_cast<int>(integer("size"));
  s.membership_epoch = integer("membership_epoch");
  s.host = v.at("host").string();
  s.pid = integer("pid");
  s.epoch = integer("epoch");
  s.step = integer("step");
  s.unix_time_s = v.at("unix_time_s").number();
  s.window_steps = integer("window_steps");
  s.step_ms = figure("step_ms");
  s.compute_ms = figure("compute_ms");
  s.peer_wait_ms = figure("peer_wait_ms");
  s.transfer_ms = figure("transfer_ms");
  s.input_ms = figure("input_ms");
  s.checkpoint_ms = figure("checkpoint_ms");
  s.other_ms = figure("other_ms");
  s.samples_per_s = figure("samples_per_s");
  s.rss_bytes = integer("rss_bytes");
  return s;
}

double wait_ms(const RankSample& s) { return s.peer_wait_ms + s.transfer_ms; }

int64_t resident_set_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long total = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &total, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace cohort::telemetry
