#include "tools/sim/collectives.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cohort/common/check.h"

namespace cohort::sim {
namespace {

double ceil_log2(int p) { return p <= 1 ? 0 : std::ceil(std::log2(double(p))); }

// The shm algorithm on one host of `p` ranks.
Cost shm_allreduce(const Topology& t, int p, double n) {
  if (p <= 1 || n <= 0) return {};
  const bool small = n <= double(t.shm_small_bytes) && n <= double(t.shm_slot_bytes);
  const double steps = small ? 1 : 2 * std::ceil(n / double(t.shm_slot_bytes));
  const double bus = 2.0 * (p - 1) / p * n;
  const double s = steps * t.shm_for(p).alpha_s + bus / t.shm_for(p).bytes_per_s;
  return {s, s, 0, bus};
}

// A reduce-scatter or allgather of n bytes (the whole buffer): the
// allreduce's half by default, at the link measured for `c`.
Cost shm_half(const Topology& t, int p, double n, Collective c = Collective::allreduce) {
  if (p <= 1 || n <= 0) return {};
  const Link& l = t.shm_for(p, c);
  const double steps = std::ceil(n / double(t.shm_slot_bytes));
  const double bus = double(p - 1) / p * n;
  const double s = steps * l.alpha_s + bus / l.bytes_per_s;
  return {s, s, 0, bus};
}

// The slowest edge of a ring step over `hosts` hosts of `per_host` ranks
// each, ranks host-major, the NIC shared by `nic_share` concurrent rings.
struct Edge {
  double alpha = 0;
  double seconds_per_byte = 0;
  const Link* network = nullptr;  // the link crossed between hosts; null on one host
  bool crosses() const { return network != nullptr; }
  // CPU a rank spends on `steps` crossing steps of `step_bytes` each.
  double cpu(double steps, double step_bytes) const {
    return crosses() ? steps * (network->cpu_step_s + step_bytes * network->cpu_s_per_byte) : 0;
  }
};

// A link's CPU part of a collective never exceeds its time: a rank cannot
// spend more CPU on it than it takes.
void add_cpu(Cost& c, double cpu_s) { c.cpu_s = std::min(c.seconds, c.cpu_s + cpu_s); }

Edge slowest_edge(const Topology& t, int hosts, int per_host, double nic_share) {
  Edge e;
  if (per_host > 1) {
    e.alpha = t.intra.alpha_s;
    e.seconds_per_byte = 1 / t.intra.bytes_per_s;
  }
  if (hosts > 1) {
    e.network = &t.network;
    e.alpha = std::max(e.alpha, t.network.alpha_s);
    e.seconds_per_byte = std::max(e.seconds_per_byte, nic_share / t.network.bytes_per_s);
  }
  return e;
}

// gloo's allreduce over hosts x per_host ranks.
Cost ring_allreduce(const Topology& t, int hosts, int per_host, double n, double nic_share = 1) {
  const int p = hosts * per_host;
  if (p <= 1 || n <= 0) return {};
  const Edge e = slowest_edge(t, hosts, per_host, nic_share);
  const double reduce = double(p - 1) / p * n / t.reduce_bytes_per_s;
  Cost c;
  if (n <= double(t.ring_small_bytes)) {
    // bcube: every rank exchanges with a partner per step; once partners
    // live on other hosts, a host's ranks all use its NIC at once.
    const double steps = 2 * ceil_log2(p);
    const double share = e.crosses() ? nic_share * per_host : 1;
    const double spb = std::max(e.seconds_per_byte, e.crosses() ? share / t.network.bytes_per_s : 0.0);
    const double wire = 2.0 * (p - 1) / p * n;
    c.seconds = steps * e.alpha + wire * spb + reduce;
    c.cpu_s = reduce;
    add_cpu(c, e.cpu(steps, wire / steps));
    if (e.crosses()) c.nic_bytes = wire * per_host;
    return c;
  }
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / double(t.ring_segment_bytes)));
  c.seconds = 2.0 * (p - 1) * (segments * e.alpha + chunk * e.seconds_per_byte) + reduce;
  c.cpu_s = reduce;
  add_cpu(c, e.cpu(2.0 * (p - 1) * segments, chunk / segments));
  if (e.crosses()) c.nic_bytes = 2.0 * (p - 1) * chunk;
  return c;
}

// gloo's ring reduce-scatter: the first half of the ring allreduce.
Cost ring_reduce_scatter(const Topology& t, int hosts, int per_host, double n) {
  const int p = hosts * per_host;
  if (p <= 1 || n <= 0) return {};
  const Edge e = slowest_edge(t, hosts, per_host, 1);
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / double(t.ring_segment_bytes)));
  const double reduce = double(p - 1) / p * n / t.reduce_bytes_per_s;
  Cost c;
  c.seconds = (p - 1) * (segments * e.alpha + chunk * e.seconds_per_byte) + reduce;
  c.cpu_s = reduce;
  add_cpu(c, e.cpu((p - 1) * segments, chunk / segments));
  if (e.crosses()) c.nic_bytes = (p - 1) * chunk;
  return c;
}

Cost ring_allgather(const Topology& t, int hosts, int per_host, double bytes_per_rank) {
  const int p = hosts * per_host;
  if (p <= 1) return {};
  const Edge e = slowest_edge(t, hosts, per_host, 1);
  Cost c;
  c.seconds = (p - 1) * (e.alpha + bytes_per_rank * e.seconds_per_byte);
  add_cpu(c, e.cpu(p - 1, bytes_per_rank));
  if (e.crosses()) c.nic_bytes = (p - 1) * bytes_per_rank;
  return c;
}

Cost shm_allgather(const Topology& t, int p, double bytes_per_rank) {
  if (p <= 1) return {};
  const Link& l = t.shm_for(p, Collective::allgather);
  const double whole = bytes_per_rank * p;
  const double steps = std::max(1.0, std::ceil(whole / double(t.shm_slot_bytes)));
  const double bus = double(p - 1) / p * whole;
  const double s = steps * l.alpha_s + bus / l.bytes_per_s;
  return {s, s, 0, bus};
}

Cost shm_broadcast(const Topology& t, int p, double n) {
  if (p <= 1 || n <= 0) return {};
  const double steps = std::max(1.0, std::ceil(n / double(t.shm_slot_bytes)));
  const double s = steps * t.shm_for(p).alpha_s + n / t.shm_for(p).bytes_per_s;
  return {s, s, 0, n};
}

}  // namespace

Algorithm resolve_algorithm(const std::string& name, const Topology& t) {
  if (name == "shm") {
    COHORT_CHECK_AS(ConfigError, t.hosts == 1) << "backend shm needs one host, the topology has " << t.hosts;
    return Algorithm::shm;
  }
  if (name == "ring" || name == "gloo") return Algorithm::ring;
  if (name == "hierarchical") return Algorithm::hierarchical;
  if (name == "auto") return t.hosts == 1 ? Algorithm::shm : Algorithm::hierarchical;
  COHORT_THROW(ConfigError) << "unknown backend '" << name << "' (auto, shm, ring, hierarchical)";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::shm: return "shm";
    case Algorithm::ring: return "ring";
    case Algorithm::hierarchical: return "hierarchical";
  }
  return "?";
}

Cost allreduce_cost(const Topology& t, Algorithm a, double n) {
  const int H = t.hosts, M = t.ranks_per_host;
  if (a == Algorithm::shm || (a == Algorithm::hierarchical && H == 1)) return shm_allreduce(t, M, n);
  if (a == Algorithm::ring || M == 1) return ring_allreduce(t, H, M, n);
  // Hierarchical across hosts.
  if (n <= double(t.hierarchical_small_bytes)) {
    Cost c = shm_allreduce(t, M, n);
    c += ring_allreduce(t, H, 1, n);
    c += shm_broadcast(t, M, n);
    return c;
  }
  Cost local = shm_half(t, M, n);
  local += shm_half(t, M, n);
  // M rings, one per local rank, each over the H hosts with a slice of n/M;
  // they share the NIC.
  Cost cross = ring_allreduce(t, H, 1, n / M, M);
  cross.nic_bytes *= M;
  const double chunks = std::max(1.0, std::ceil(n / double(t.hierarchical_chunk_bytes)));
  Cost c;
  c.seconds = std::max(local.seconds, cross.seconds) + std::min(local.seconds, cross.seconds) / chunks;
  c.cpu_s = local.cpu_s + cross.cpu_s;
  c.nic_bytes = cross.nic_bytes;
  c.shm_bytes = local.shm_bytes;
  return c;
}

Cost allgather_cost(const Topology& t, Algorithm a, double b) {
  const int H = t.hosts, M = t.ranks_per_host;
  if (a == Algorithm::shm || (a == Algorithm::hierarchical && H == 1)) return shm_allgather(t, M, b);
  if (a == Algorithm::ring || M == 1) return ring_allgather(t, H, M, b);
  Cost c = shm_allgather(t, M, b);
  c += ring_allgather(t, H, 1, b * M);
  c += shm_broadcast(t, M, b * M * (H - 1));
  return c;
}

Cost reduce_scatter_cost(const Topology& t, Algorithm a, double n) {
  const int H = t.hosts, M = t.ranks_per_host;
  if (a == Algorithm::shm || (a == Algorithm::hierarchical && H == 1)) return shm_half(t, M, n, Collective::reduce_scatter);
  // The hierarchical communicator hands reduce-scatter to its flat ring.
  return ring_reduce_scatter(t, H, M, n);
}

Cost tree_gather_broadcast_cost(const Topology& t, double bytes) {
  const int p = t.ranks();
  if (p <= 1) return {};
  const Edge e = slowest_edge(t, t.hosts, t.ranks_per_host, 1);
  Cost c;
  c.seconds = 2 * ceil_log2(p) * (e.alpha + bytes * e.seconds_per_byte);
  return c;
}

Cost parameter_server_exchange_cost(const Topology& t, int servers, double bytes) {
  const int p = t.ranks(), W = p - servers;
  COHORT_CHECK_AS(ConfigError, servers >= 1 && W >= 1)
      << "a parameter-server job of " << p << " ranks needs at least one worker and one server, not " << servers
      << " servers";
  if (bytes <= 0) return {};
  const double part = bytes / servers;  // what one worker sends one server
  auto host_of = [&](int rank) { return rank / t.ranks_per_host; };
  // Per host: bytes through its NIC (the busier direction); per process:
  // bytes it exchanges with processes of its own host.
  std::vector<double> nic_out(size_t(t.hosts), 0), nic_in(size_t(t.hosts), 0);
  std::vector<double> local(size_t(p), 0);
  for (int w = 0; w < W; ++w)
    for (int s = W; s < p; ++s) {
      if (host_of(w) == host_of(s)) {
        local[size_t(w)] += part;
        local[size_t(s)] += part;
      } else {
        nic_out[size_t(host_of(w))] += part;
        nic_in[size_t(host_of(s))] += part;
      }
    }
  double nic = 0, intra = 0;
  for (int h = 0; h < t.hosts; ++h) nic = std::max({nic, nic_out[size_t(h)], nic_in[size_t(h)]});
  for (double b : local) intra = std::max(intra, b);
  Cost c;
  const double alpha = nic > 0 ? std::max(t.network.alpha_s, intra > 0 ? t.ps.alpha_s : 0.0) : t.ps.alpha_s;
  // Every worker's requests go out at once, one per server, and a server
  // answers them as they come: the busiest link sets the pace.
  c.seconds = alpha + std::max(nic / t.network.bytes_per_s, intra / t.ps.bytes_per_s);
  // The servers copy what arrives (and what leaves) once.
  const double copy = double(W) * part / t.copy_bytes_per_s;
  c.seconds += copy;
  c.cpu_s = copy;
  c.nic_bytes = nic;
  return c;
}

}  // namespace cohort::sim
