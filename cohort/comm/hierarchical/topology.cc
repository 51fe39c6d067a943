#include "cohort/comm/hierarchical/topology.h"

#include <algorithm>
#include <map>

namespace cohort::comm::hierarchical {

Topology make_topology(std::span<const uint64_t> host_hashes) {
  Topology t;
  std::map<uint64_t, int> index;
  for (size_t r = 0; r < host_hashes.size(); ++r) {
    auto [it, added] = index.emplace(host_hashes[r], t.hosts);
    if (added) {
      ++t.hosts;
      t.local_size.push_back(0);
      t.first_rank.push_back(static_cast<int>(r));
    }
    const int h = it->second;
    t.host_of.push_back(h);
    t.local_rank_of.push_back(t.local_size[h]++);
  }
  t.min_local = t.hosts ? *std::min_element(t.local_size.begin(), t.local_size.end()) : 0;
  t.uniform = t.hosts > 0 && std::all_of(t.local_size.begin(), t.local_size.end(),
                                         [&](int n) { return n == t.local_size[0]; });
  t.contiguous = true;
  for (size_t r = 0; r < host_hashes.size(); ++r) {
    const int h = t.host_of[r];
    if (static_cast<int>(r) != t.first_rank[h] + t.local_rank_of[r] ||
        (h > 0 && t.first_rank[h] != t.first_rank[h - 1] + t.local_size[h - 1]))
      t.contiguous = false;
  }
  return t;
}

}  // namespace cohort::comm::hierarchical
