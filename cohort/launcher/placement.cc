#include "cohort/launcher/placement.h"

#include <set>

#include "cohort/common/network_interface.h"
#include "cohort/launcher/options.h"

namespace cohort::launcher {

std::string this_host_name() {
  std::string name = net::host_name();
  return name.empty() ? "localhost" : name;
}

bool is_this_host(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  const std::string mine = this_host_name();
  if (host == mine) return true;
  // "node1" names the machine whose name is "node1.example.org", and back.
  const std::string short_mine = mine.substr(0, mine.find('.'));
  return host.find('@') == std::string::npos && host.substr(0, host.find('.')) == short_mine &&
         (host.find('.') == std::string::npos || mine.find('.') == std::string::npos);
}

std::vector<RankPlacement> place_ranks(const std::vector<HostSlots>& hosts, int num_ranks) {
  const int slots = total_slots(hosts);
  if (num_ranks > slots)
    throw UsageError("-np " + std::to_string(num_ranks) + " is more than the " + std::to_string(slots) +
                     " slot(s) of the hosts " + format_host_list(hosts));
  std::vector<RankPlacement> placement;
  int rank = 0;
  int host_index = 0;
  for (const HostSlots& h : hosts) {
    if (rank == num_ranks) break;
    const int here = std::min(h.slots, num_ranks - rank);
    const bool remote = !is_this_host(h.name);
    for (int local = 0; local < here; ++local)
      placement.push_back({.rank = rank++, .host = h.name, .host_index = host_index, .local_rank = local,
                           .local_size = here, .remote = remote});
    ++host_index;
  }
  return placement;
}

std::vector<RankPlacement> place_locally(int num_ranks, const std::string& host_name) {
  std::vector<RankPlacement> placement;
  for (int r = 0; r < num_ranks; ++r)
    placement.push_back({.rank = r, .host = host_name, .host_index = 0, .local_rank = r, .local_size = num_ranks,
                         .remote = false});
  return placement;
}

int host_count(const std::vector<RankPlacement>& placement) {
  std::set<std::string> hosts;
  for (const RankPlacement& p : placement) hosts.insert(p.host);
  return static_cast<int>(hosts.size());
}

}  // namespace cohort::launcher
