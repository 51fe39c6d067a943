// Helpers shared by the Store implementations (internal to cohort_rendezvous):
// deadlines that do not overflow, key quoting for error messages, the
// counters behind add(), and the errors every store throws in the same words.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous::detail {

using Clock = std::chrono::steady_clock;

// now + timeout, saturated so that Duration::max() means "practically never";
// a negative timeout is treated as zero.
Clock::time_point deadline_after(Duration timeout);
// The same from `now`.
Clock::time_point deadline_after(Clock::time_point now, Duration timeout);

// Milliseconds from now until `deadline`, at least 0.
Duration remaining(Clock::time_point deadline);

// 'key' with non-printable bytes escaped as \xNN, for messages.
std::string quote(std::string_view key);
// 'a', 'b', 'c'
std::string quote_all(std::span<const std::string> keys);

// TimeoutError: "<where>: get of key 'k' timed out after N ms".
[[noreturn]] void throw_get_timeout(const std::string& where, const std::string& key,
                                    Duration timeout);
// TimeoutError: "<where>: wait timed out after N ms; keys never set: 'a', 'b'".
[[noreturn]] void throw_wait_timeout(const std::string& where, std::span<const std::string> missing,
                                     Duration timeout);

// The counter semantics of Store::add: `current` is the stored text (nullptr
// when absent, which counts as 0). Returns the new value; throws Error when
// the stored value is not a decimal integer or the sum overflows int64.
int64_t add_to_counter(const std::string& where, const std::string& key, const Bytes* current,
                       int64_t delta);

}  // namespace cohort::rendezvous::detail
