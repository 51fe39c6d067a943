#include "cohort/data/cursor.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::data {

uint64_t Cursor::delivered() const {
  uint64_t n = consumed;
  for (const auto& r : also_consumed) n += r.end - r.begin;
  return n;
}

Cursor Cursor::next_epoch() const { return epoch_start(dataset_size, order, epoch + 1); }

Cursor epoch_start(uint64_t dataset_size, OrderOptions order, int64_t epoch) {
  Cursor c;
  c.dataset_size = dataset_size;
  c.order = order;
  c.epoch = epoch;
  return c;
}

void Cursor::validate() const {
  COHORT_CHECK_AS(ConfigError, epoch >= 0) << "cursor: negative epoch " << epoch;
  COHORT_CHECK_AS(ConfigError, consumed <= dataset_size)
      << "cursor: consumed " << consumed << " is past the data set's " << dataset_size << " samples";
  uint64_t floor = consumed;
  for (const auto& r : also_consumed) {
    COHORT_CHECK_AS(ConfigError, r.begin > floor && r.begin < r.end && r.end <= dataset_size)
        << "cursor: range " << r.begin << "-" << r.end << " is empty, unsorted, touches the previous one, or "
        << "runs past " << dataset_size;
    floor = r.end;
  }
}

void normalise(uint64_t& consumed, std::vector<PositionRange>& ranges) {
  std::erase_if(ranges, [](const PositionRange& r) { return r.begin == r.end; });
  ranges.push_back({0, consumed});
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::vector<PositionRange> merged;
  for (const auto& r : ranges) {
    if (r.begin == r.end) continue;
    if (!merged.empty() && r.begin <= merged.back().end) {
      COHORT_CHECK(r.begin == merged.back().end)
          << "positions " << r.begin << ".." << std::min(r.end, merged.back().end) - 1 << " delivered twice";
      merged.back().end = r.end;
    } else {
      merged.push_back(r);
    }
  }
  consumed = 0;
  if (!merged.empty() && merged.front().begin == 0) {
    consumed = merged.front().end;
    merged.erase(merged.begin());
  }
  ranges = std::move(merged);
}

std::string Cursor::to_string() const {
  std::ostringstream os;
  os << "cohort-data-cursor v1 size=" << dataset_size << " seed=" << order.seed << " shuffle=" << int(order.shuffle)
     << " sharding=" << (order.sharding == Sharding::by_record ? "record" : "file") << " epoch=" << epoch
     << " consumed=" << consumed << " also=";
  for (size_t i = 0; i < also_consumed.size(); ++i)
    os << (i ? "," : "") << also_consumed[i].begin << "-" << also_consumed[i].end;
  return os.str();
}

Cursor Cursor::parse(std::string_view text) {
  auto fail = [&](std::string_view what) {
    COHORT_THROW(ConfigError) << "not a cursor (" << what << "): \"" << text.substr(0, 200) << "\"";
  };
  auto number = [&](std::string_view s, auto& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc() || p != s.data() + s.size()) fail("bad number \"" + std::string(s) + "\"");
  };
  std::vector<std::string_view> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    if (end > pos) words.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  if (words.size() != 9 || words[0] != "cohort-data-cursor" || words[1] != "v1") fail("expected 9 fields, v1");
  const char* keys[] = {"size=", "seed=", "shuffle=", "sharding=", "epoch=", "consumed=", "also="};
  std::string_view values[7];
  for (size_t i = 0; i < 7; ++i) {
    if (!words[i + 2].starts_with(keys[i])) fail(std::string("expected ") + keys[i]);
    values[i] = words[i + 2].substr(std::string_view(keys[i]).size());
  }
  Cursor c;
  number(values[0], c.dataset_size);
  number(values[1], c.order.seed);
  int shuffle = 0;
  number(values[2], shuffle);
  if (shuffle != 0 && shuffle != 1) fail("shuffle must be 0 or 1");
  c.order.shuffle = shuffle == 1;
  if (values[3] == "record") c.order.sharding = Sharding::by_record;
  else if (values[3] == "file") c.order.sharding = Sharding::by_file;
  else fail("sharding must be record or file");
  number(values[4], c.epoch);
  number(values[5], c.consumed);
  for (std::string_view rest = values[6]; !rest.empty();) {
    const size_t comma = std::min(rest.find(','), rest.size());
    const std::string_view item = rest.substr(0, comma);
    rest = comma < rest.size() ? rest.substr(comma + 1) : std::string_view();
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) fail("a range needs begin-end");
    PositionRange r;
    number(item.substr(0, dash), r.begin);
    number(item.substr(dash + 1), r.end);
    c.also_consumed.push_back(r);
  }
  c.validate();
  return c;
}

}  // namespace cohort::data
