// Host lists: the machines a job runs on and how many ranks each takes, from
// `-H host1:2,host2:2` or from a hostfile.
//
// Hostfile format (OpenMPI's, the part cohortrun uses):
//   # a comment; blank lines are ignored
//   node1 slots=4          # four ranks on node1
//   node2                  # one rank (slots defaults to 1)
//   user@node3 slots=2 max_slots=8
// A host is a name or address made of letters, digits and . _ - @ (an ssh
// user@ prefix is kept: it reaches the launch template's {host}).
// max_slots=N is accepted for compatibility and ignored. A host named twice
// (in either form) gets the sum of its slots, in the order of its first
// appearance, as with mpirun.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::launcher {

struct HostSlots {
  std::string name;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// Most slots one host may declare, and most hosts in a list.
inline constexpr int kMaxSlotsPerHost = 4096;
inline constexpr int kMaxHosts = 4096;

// Empty when `name` is an acceptable host name, else why not.
std::string host_name_problem(std::string_view name);

// The host of "user@host" (what resolves; the user is the launch's).
std::string_view host_without_user(std::string_view host);

// Parses "-H" values: comma-separated "host" or "host:slots". Throws
// UsageError naming the bad entry ("-H 'a:x': slots must be a positive
// integer, got 'x'").
std::vector<HostSlots> parse_host_list(std::string_view text);

// Parses hostfile text; `source` names the file in messages. Throws
// UsageError of the form "hostfile F:LINE: what is wrong, got 'text'" for a
// malformed line, and "hostfile F: no hosts" for a file without any.
std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& source);

// Reads and parses the hostfile at `path`; UsageError when it cannot be read.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Sum of the slots.
int total_slots(const std::vector<HostSlots>& hosts);

// "a:2,b:2" for messages.
std::string format_host_list(const std::vector<HostSlots>& hosts);

}  // namespace cohort::launcher
