#include "cohort/rendezvous/store_util.h"

#include <charconv>
#include <cstdio>

#include "cohort/common/check.h"

namespace cohort::rendezvous::detail {

Clock::time_point deadline_after(Duration timeout) { return deadline_after(Clock::now(), timeout); }

Clock::time_point deadline_after(Clock::time_point now, Duration timeout) {
  // Ten years is "never" for a rendezvous and keeps now() + timeout far from
  // the clock's overflow.
  constexpr Duration kNever = std::chrono::duration_cast<Duration>(std::chrono::hours(24 * 365 * 10));
  if (timeout < Duration::zero()) timeout = Duration::zero();
  if (timeout > kNever) timeout = kNever;
  return now + timeout;
}

Duration remaining(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return Duration::zero();
  return std::chrono::ceil<Duration>(left);
}

std::string quote(std::string_view key) {
  std::string out = "'";
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  out += '\'';
  return out;
}

std::string quote_all(std::span<const std::string> keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += quote(keys[i]);
  }
  return out;
}

void throw_get_timeout(const std::string& where, const std::string& key, Duration timeout) {
  COHORT_THROW(TimeoutError) << where << ": get of key " << quote(key) << " timed out after "
                             << timeout.count() << " ms (is the rank that sets it alive?)";
  __builtin_unreachable();
}

void throw_wait_timeout(const std::string& where, std::span<const std::string> missing,
                        Duration timeout) {
  COHORT_THROW(TimeoutError) << where << ": wait timed out after " << timeout.count()
                             << " ms; keys never set: " << quote_all(missing);
  __builtin_unreachable();
}

int64_t add_to_counter(const std::string& where, const std::string& key, const Bytes* current,
                       int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const char* first = current->data();
    const char* last = first + current->size();
    auto [end, ec] = std::from_chars(first, last, value);
    COHORT_CHECK(ec == std::errc() && end == last && !current->empty())
        << where << ": add on key " << quote(key) << " whose value " << quote(*current)
        << " is not a decimal int64";
  }
  int64_t sum = 0;
  COHORT_CHECK(!__builtin_add_overflow(value, delta, &sum))
      << where << ": add of " << delta << " to key " << quote(key) << " (" << value
      << ") overflows int64";
  return sum;
}

}  // namespace cohort::rendezvous::detail
