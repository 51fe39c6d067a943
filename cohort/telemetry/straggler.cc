#include "cohort/telemetry/straggler.h"

#include <algorithm>
#include <cstdio>

#include "cohort/common/json.h"
#include "cohort/common/json_object.h"
#include "cohort/common/stats.h"

namespace cohort::telemetry {
namespace {

// The parts of a rank's own time (not waiting for peers), with the name a
// verdict gives each.
struct Part {
  const char* cause;
  double RankSample::*ms;
};
constexpr Part kParts[] = {
    {"compute", &RankSample::compute_ms}, {"input", &RankSample::input_ms}, {"network", &RankSample::transfer_ms}};

double own_ms(const RankSample& s) { return s.compute_ms + s.input_ms + s.transfer_ms; }

double median_of_others(const std::vector<const RankSample*>& ranks, size_t except, double RankSample::*ms) {
  std::vector<double> values;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (i != except) values.push_back(ms ? ranks[i]->*ms : own_ms(*ranks[i]));
  return median(values);
}

}  // namespace

std::string StragglerVerdict::message() const {
  if (!present) return "no straggler";
  char line[256];
  std::snprintf(line, sizeof line,
                "rank %d (pid %lld on %s) is %.0f%% slower than the median of the others at %s for %.1f s", rank,
                static_cast<long long>(pid), host.c_str(), slower_by * 100, cause.c_str(), unix_time_s - since_unix_s);
  return line;
}

std::string to_json(const StragglerVerdict& v) {
  return JsonObject()
      .add("present", v.present)
      .add("rank", v.rank)
      .add("host", v.host)
      .add("pid", v.pid)
      .add("cause", v.cause)
      .add("slower_by", v.slower_by, 9)
      .add("since_unix_s", v.since_unix_s, 17)
      .add("unix_time_s", v.unix_time_s, 17)
      .add("message", v.message())
      .str();
}

StragglerVerdict straggler_verdict_from_json(std::string_view text, std::string_view source) {
  const json::Value v = json::parse(text, source);
  return {.present = v.at("present").boolean(),
          .rank = static_cast<int>(v.at("rank").number()),
          .host = v.at("host").string(),
          .pid = static_cast<int64_t>(v.at("pid").number()),
          .cause = v.at("cause").string(),
          .slower_by = v.at("slower_by").number(),
          .since_unix_s = v.at("since_unix_s").number(),
          .unix_time_s = v.at("unix_time_s").number()};
}

std::optional<Slowest> slowest_rank(const std::vector<RankSample>& samples) {
  std::vector<const RankSample*> ranks;
  for (const RankSample& s : samples)
    if (s.window_steps > 0) ranks.push_back(&s);
  if (ranks.size() < 2) return std::nullopt;
  size_t worst = 0;
  for (size_t i = 1; i < ranks.size(); ++i)
    if (own_ms(*ranks[i]) > own_ms(*ranks[worst])) worst = i;
  const double others = median_of_others(ranks, worst, nullptr);
  Slowest out{.rank = ranks[worst]->rank, .slower_by = others > 0 ? own_ms(*ranks[worst]) / others - 1 : 0.0};
  // The part whose excess over the others' median is the largest.
  double largest = -1;
  for (const Part& part : kParts) {
    const double excess = ranks[worst]->*part.ms - median_of_others(ranks, worst, part.ms);
    if (excess > largest) {
      largest = excess;
      out.cause = part.cause;
    }
  }
  return out;
}

StragglerDetector::StragglerDetector(StragglerOptions options) : options_(options) {}

StragglerVerdict StragglerDetector::observe(const std::vector<RankSample>& samples, double now_unix_s) {
  const bool was_named = named_;
  const int was_rank = named_rank_;
  StragglerVerdict v{.unix_time_s = now_unix_s};
  const std::optional<Slowest> slowest = slowest_rank(samples);
  if (!slowest || slowest->slower_by < options_.threshold) {
    candidate_ = -1;
    named_ = false;
  } else {
    if (slowest->rank != candidate_) {
      candidate_ = slowest->rank;
      candidate_since_ = now_unix_s;
    }
    named_ = now_unix_s - candidate_since_ >= options_.hold_s;
    if (named_) {
      const auto it =
          std::find_if(samples.begin(), samples.end(), [&](const RankSample& s) { return s.rank == slowest->rank; });
      v = {.present = true,
           .rank = slowest->rank,
           .host = it->host,
           .pid = it->pid,
           .cause = slowest->cause,
           .slower_by = slowest->slower_by,
           .since_unix_s = candidate_since_,
           .unix_time_s = now_unix_s};
    }
  }
  named_rank_ = named_ ? candidate_ : -1;
  changed_ = named_ != was_named || named_rank_ != was_rank;
  return v;
}

}  // namespace cohort::telemetry
