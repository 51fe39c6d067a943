#include "cohort/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <optional>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"

namespace cohort::logging {
namespace {

std::atomic<int> g_rank{-1};

std::optional<Level> find_level(std::string_view text) {
  constexpr std::string_view kNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (text == kNames[i]) return static_cast<Level>(i);
  return std::nullopt;
}

// A malformed COHORT_LOG_LEVEL is stored as kMalformed rather than thrown
// from the initializer, so that the error raised about it (whose raising
// consults would_log) never re-enters this initialization.
constexpr int kMalformed = -1;

std::atomic<int>& threshold_slot() {
  static std::atomic<int> slot{[] {
    const auto level = find_level(tunables::log_level());
    return level ? static_cast<int>(*level) : kMalformed;
  }()};
  return slot;
}

constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E', '-'};

}  // namespace

Level parse_level(std::string_view text) {
  if (const auto level = find_level(text)) return *level;
  COHORT_THROW(ConfigError) << "COHORT_LOG_LEVEL='" << text
                            << "' is not one of trace, debug, info, warn, error, off";
}

Level threshold() {
  const int slot = threshold_slot().load(std::memory_order_relaxed);
  if (slot == kMalformed) return parse_level(tunables::log_level());  // throws, naming the value
  return static_cast<Level>(slot);
}

bool would_log(Level level) {
  int slot = threshold_slot().load(std::memory_order_relaxed);
  if (slot == kMalformed) slot = static_cast<int>(Level::warn);
  return static_cast<int>(level) >= slot;
}
void set_threshold(Level level) { threshold_slot().store(static_cast<int>(level)); }
void set_rank(int rank) { g_rank.store(rank); }

Line::Line(Level level, const char*, int) : level_(level) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", &tm);
  const int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  const int rank = g_rank.load();
  stream_ << "[cohort ";
  if (rank >= 0) stream_ << rank; else stream_ << '-';
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03d", ms);
  stream_ << ' ' << kLetters[static_cast<int>(level_)] << ' ' << when << frac << "] ";
}

Line::~Line() {
  stream_ << '\n';
  const std::string s = stream_.str();
  // One write so that lines from concurrent threads and ranks do not interleave.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, s.data(), s.size());
}

}  // namespace cohort::logging
