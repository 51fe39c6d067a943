// libFuzzer harness: cohortrun's host lists, `-H host1:2,host2:2` and
// hostfiles (cohort/launcher/host_list.h).
//
// Input: byte 0 picks the parser (even: -H, odd: hostfile), the rest is its
// text.
//
// Properties, besides the sanitizers': UsageError is the only failure (any
// other exception escapes and counts as a crash); a parsed list is well
// formed (acceptable names, distinct, slots 1..kMaxSlotsPerHost, at most
// kMaxHosts hosts); its -H form (format_host_list) parses back to it.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/launcher/host_list.h"
#include "cohort/launcher/options.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool hostfile = data[0] & 1;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<HostSlots> hosts;
  try {
    hosts = hostfile ? parse_hostfile(text, "fuzzed") : parse_host_list(text);
  } catch (const UsageError& e) {
    FUZZ_CHECK(std::string_view(e.what()).size() > 0);
    return 0;
  }
  FUZZ_CHECK(!hosts.empty() && hosts.size() <= static_cast<size_t>(kMaxHosts));
  std::set<std::string> names;
  for (const HostSlots& h : hosts) {
    FUZZ_CHECK(host_name_problem(h.name).empty());
    FUZZ_CHECK(h.slots >= 1 && h.slots <= kMaxSlotsPerHost);
    FUZZ_CHECK(names.insert(h.name).second);
  }
  FUZZ_CHECK(parse_host_list(format_host_list(hosts)) == hosts);
  return 0;
}
