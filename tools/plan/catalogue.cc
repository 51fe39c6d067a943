#include "tools/plan/catalogue.h"

#include <algorithm>
#include <set>

#include "cohort/common/check.h"
#include "tools/plan/profile.h"
#include "tools/sim/fields.h"

namespace cohort::plan {

using sim::Fields;
using sim::Range;

namespace {

// Powers of two up to n, and n itself.
std::vector<int> powers_of_two_and(int n) {
  std::set<int> s;
  for (int r = 1; r <= n; r *= 2) s.insert(r);
  s.insert(n);
  return {s.begin(), s.end()};
}

MachineType read_type(const json::Value& v, const std::string& where, const json::Value* default_topology,
                      const std::string& path) {
  MachineType m;
  Fields f(v, where);
  m.name = f.text("name", std::nullopt);
  if (m.name.empty() || m.name.find_first_of(" \t,") != std::string::npos)
    sim::field_error(f.required("name"), f.path("name"), "expected a name without spaces or commas");
  m.cores = int(f.integer("cores", std::nullopt, 1, 1 << 16));
  m.accelerators = int(f.integer("accelerators", 0, 0, 1 << 10));
  m.memory_bytes = f.number("memory_bytes", std::nullopt, Range::positive);
  m.memory_bytes_per_rank = f.number("memory_bytes_per_rank", 0.0, Range::non_negative);
  m.price_per_hour = f.number("price_per_hour", std::nullopt, Range::non_negative);
  m.available = int(f.integer("available", std::nullopt, 1, 1 << 20));
  const json::Value* speedup = f.optional("compute_speedup");
  const json::Value* flops = f.optional("flop_per_s");
  if (speedup && flops) sim::field_error(*flops, f.path("flop_per_s"), "give compute_speedup or flop_per_s, not both");
  m.compute_speedup = f.number("compute_speedup", 1.0, Range::positive);
  m.flop_per_s = f.number("flop_per_s", 0.0, Range::positive);
  const json::Value* topo = f.optional("topology");
  if (!topo) topo = default_topology;
  if (!topo)
    sim::field_error(v, where,
                     "missing field 'topology' (the links inside one machine, a topology object or file; here or at "
                     "the catalogue's top level)");
  m.topology = topo->is_string()
                   ? read_named_file<sim::Topology>(*topo, topo == default_topology ? "topology" : f.path("topology"),
                                                    path, sim::read_topology_file)
                   : sim::read_topology(*topo);
  m.topology.network.bytes_per_s = f.number("network_bytes_per_s", std::nullopt, Range::positive);
  m.topology.network.alpha_s = f.number("network_latency_s", m.topology.network.alpha_s, Range::non_negative);
  m.topology.hosts = 1;
  m.topology.one_machine = false;
  m.topology.stragglers.clear();
  m.topology.cores_per_host = m.accelerators > 0 ? 0 : m.cores;
  m.ranks_per_machine = powers_of_two_and(m.accelerators > 0 ? m.accelerators : m.cores);
  f.finish();
  return m;
}

}  // namespace

Catalogue read_catalogue(const json::Value& doc, const std::string& path) {
  Catalogue c;
  c.path = path;
  Fields f(doc, "");
  const json::Value* default_topology = f.optional("topology");
  const json::Value& list = f.required("machine_types");
  if (!list.is_array() || list.items().empty())
    sim::field_error(list, "machine_types", "expected a non-empty array of machine types");
  std::set<std::string> names;
  for (size_t i = 0; i < list.items().size(); ++i) {
    const std::string where = "machine_types[" + std::to_string(i) + "]";
    c.types.push_back(read_type(list.items()[i], where, default_topology, path));
    if (!names.insert(c.types.back().name).second)
      sim::field_error(list.items()[i], where + ".name", "'" + c.types.back().name + "' is named twice");
  }
  f.finish();
  return c;
}

Catalogue read_catalogue_file(const std::string& path) { return read_catalogue(json::parse_file(path), path); }

Catalogue catalogue_from_topology_file(const std::string& path, double price_per_hour, double memory_bytes,
                                       double memory_bytes_per_rank) {
  Catalogue c;
  c.path = path;
  MachineType m;
  m.topology = sim::read_topology_file(path);
  const size_t slash = path.find_last_of('/');
  m.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (m.name.size() > 5 && m.name.ends_with(".json")) m.name.resize(m.name.size() - 5);
  m.available = m.topology.hosts;
  m.cores = m.topology.cores_per_host > 0 ? m.topology.cores_per_host : m.topology.ranks_per_host;
  m.ranks_per_machine = powers_of_two_and(std::max(m.cores, m.topology.ranks_per_host));
  m.price_per_hour = price_per_hour;
  m.memory_bytes = memory_bytes;
  m.memory_bytes_per_rank = memory_bytes_per_rank;
  c.types.push_back(std::move(m));
  return c;
}

}  // namespace cohort::plan
