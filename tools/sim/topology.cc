#include "tools/sim/topology.h"

#include <algorithm>
#include <sstream>

#include "cohort/common/check.h"
#include "tools/sim/fields.h"

namespace cohort::sim {
namespace {

Link read_link_fields(Fields& f) {
  Link l;
  l.alpha_s = f.number("alpha_s", 0.0, Range::non_negative);
  l.bytes_per_s = f.number("bytes_per_s", kInfinity, Range::positive);
  l.cpu_step_s = f.number("cpu_step_s", 0.0, Range::non_negative);
  l.cpu_s_per_byte = f.number("cpu_s_per_byte", 0.0, Range::non_negative);
  return l;
}

Link read_link(Fields& parent, std::string_view key, std::vector<ShmLink>* by_ranks = nullptr) {
  const json::Value* v = parent.optional(key);
  if (!v) return {};
  Fields f(*v, parent.path(key));
  Link l = read_link_fields(f);
  if (by_ranks)
    if (const json::Value* list = f.optional("by_ranks")) {
      const std::string path = f.path("by_ranks");
      if (!list->is_array()) field_error(*list, path, "expected an array of {ranks, [collective,] alpha_s, bytes_per_s}");
      for (size_t i = 0; i < list->items().size(); ++i) {
        Fields e(list->items()[i], path + "[" + std::to_string(i) + "]");
        ShmLink x;
        x.ranks = static_cast<int>(e.integer("ranks", std::nullopt, 1, 1 << 12));
        const std::string c = e.text("collective", "allreduce");
        try {
          x.collective = parse_collective(c);
        } catch (const ConfigError& err) {
          field_error(*e.optional("collective"), e.path("collective"), err.what());
        }
        for (const ShmLink& y : *by_ranks)
          if (y.ranks == x.ranks && y.collective == x.collective)
            field_error(list->items()[i], e.path("ranks"),
                        "ranks " + std::to_string(x.ranks) + " given twice for " + c);
        x.link = read_link_fields(e);
        by_ranks->push_back(x);
        e.finish();
      }
    }
  f.finish();
  return l;
}

}  // namespace

Topology read_topology(const json::Value& doc) {
  Topology t;
  Fields f(doc, "");
  t.hosts = static_cast<int>(f.integer("hosts", 1, 1, 1 << 20));
  t.ranks_per_host = static_cast<int>(f.integer("ranks_per_host", 1, 1, 1 << 12));
  if (const json::Value* links = f.optional("links")) {
    Fields l(*links, "links");
    t.shm = read_link(l, "shm", &t.shm_by_ranks);
    t.intra = read_link(l, "intra");
    t.network = read_link(l, "network");
    t.ps = read_link(l, "ps");
    l.finish();
  }
  t.reduce_bytes_per_s = f.number("reduce_bytes_per_s", kInfinity, Range::positive);
  t.copy_bytes_per_s = f.number("copy_bytes_per_s", kInfinity, Range::positive);
  if (const json::Value* a = f.optional("algorithms")) {
    Fields g(*a, "algorithms");
    constexpr int64_t kMax = int64_t(1) << 40;
    t.shm_slot_bytes = g.integer("shm_slot_bytes", t.shm_slot_bytes, 4096, kMax);
    t.shm_small_bytes = g.integer("shm_small_bytes", t.shm_small_bytes, 0, kMax);
    t.ring_small_bytes = g.integer("ring_small_bytes", t.ring_small_bytes, 0, kMax);
    t.ring_segment_bytes = g.integer("ring_segment_bytes", t.ring_segment_bytes, 1, kMax);
    t.hierarchical_chunk_bytes = g.integer("hierarchical_chunk_bytes", t.hierarchical_chunk_bytes, 1, kMax);
    t.hierarchical_small_bytes = g.integer("hierarchical_small_bytes", t.hierarchical_small_bytes, 0, kMax);
    g.finish();
  }
  if (const json::Value* c = f.optional("cpu")) {
    Fields g(*c, "cpu");
    t.cores_per_host = static_cast<int>(g.integer("cores_per_host", 0, 0, 1 << 20));
    t.one_machine = g.flag("one_machine", false);
    t.background_threads = g.number("background_threads", 0.0, Range::non_negative);
    g.finish();
  }
  if (const json::Value* e = f.optional("engine")) {
    Fields g(*e, "engine");
    t.cycle_overhead_s = g.number("cycle_overhead_s", 0.0, Range::non_negative);
    t.wake_s = g.number("wake_s", 0.0, Range::non_negative);
    g.finish();
  }
  if (const json::Value* s = f.optional("stragglers")) {
    if (!s->is_array()) field_error(*s, "stragglers", std::string("expected an array, got ") + json::a_kind_name(s->kind()));
    for (size_t i = 0; i < s->items().size(); ++i) {
      Fields g(s->items()[i], "stragglers[" + std::to_string(i) + "]");
      Straggler st;
      st.rank = static_cast<int>(g.integer("rank", std::nullopt, 0, 1 << 30));
      st.compute_factor = g.number("compute_factor", std::nullopt, Range::positive);
      g.finish();
      t.stragglers.push_back(st);
    }
  }
  f.finish();
  return t;
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce: return "allreduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::allgather: return "allgather";
  }
  return "?";
}

Collective parse_collective(const std::string& name) {
  for (Collective c : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather})
    if (name == collective_name(c)) return c;
  COHORT_THROW(ConfigError) << "unknown collective '" << name << "' (allreduce, reduce_scatter, allgather)";
}

const Link& Topology::shm_for(int ranks, Collective c) const {
  for (const ShmLink& x : shm_by_ranks)
    if (x.ranks == ranks && x.collective == c) return x.link;
  if (c != Collective::allreduce) return shm_for(ranks);
  return shm;
}

Topology read_topology_file(const std::string& path) { return read_topology(json::parse_file(path)); }

Topology with_hosts(Topology t, int hosts) {
  t.hosts = hosts;
  std::erase_if(t.stragglers, [&](const Straggler& s) { return s.rank >= t.ranks(); });
  return t;
}

std::string topology_json(const Topology& t) {
  std::ostringstream os;
  os.precision(10);
  auto fields = [&](const Link& l) {
    os << "\"alpha_s\": " << l.alpha_s;
    if (l.bytes_per_s < kInfinity) os << ", \"bytes_per_s\": " << l.bytes_per_s;
    if (l.cpu_step_s > 0) os << ", \"cpu_step_s\": " << l.cpu_step_s;
    if (l.cpu_s_per_byte > 0) os << ", \"cpu_s_per_byte\": " << l.cpu_s_per_byte;
  };
  auto link = [&](const char* name, const Link& l, bool last, const std::vector<ShmLink>& by_ranks = {}) {
    os << "    \"" << name << "\": {";
    fields(l);
    if (!by_ranks.empty()) {
      os << ", \"by_ranks\": [";
      for (size_t i = 0; i < by_ranks.size(); ++i) {
        os << (i ? ", " : "") << "{\"ranks\": " << by_ranks[i].ranks << ", ";
        if (by_ranks[i].collective != Collective::allreduce)
          os << "\"collective\": \"" << collective_name(by_ranks[i].collective) << "\", ";
        fields(by_ranks[i].link);
        os << "}";
      }
      os << "]";
    }
    os << "}" << (last ? "\n" : ",\n");
  };
  os << "{\n  \"hosts\": " << t.hosts << ",\n  \"ranks_per_host\": " << t.ranks_per_host << ",\n  \"links\": {\n";
  link("shm", t.shm, false, t.shm_by_ranks);
  link("intra", t.intra, false);
  link("ps", t.ps, false);
  link("network", t.network, true);
  os << "  },\n";
  if (t.reduce_bytes_per_s < kInfinity) os << "  \"reduce_bytes_per_s\": " << t.reduce_bytes_per_s << ",\n";
  if (t.copy_bytes_per_s < kInfinity) os << "  \"copy_bytes_per_s\": " << t.copy_bytes_per_s << ",\n";
  os << "  \"algorithms\": {\"shm_slot_bytes\": " << t.shm_slot_bytes << ", \"shm_small_bytes\": " << t.shm_small_bytes
     << ", \"ring_small_bytes\": " << t.ring_small_bytes << ", \"ring_segment_bytes\": " << t.ring_segment_bytes
     << ", \"hierarchical_chunk_bytes\": " << t.hierarchical_chunk_bytes
     << ", \"hierarchical_small_bytes\": " << t.hierarchical_small_bytes << "},\n";
  os << "  \"cpu\": {\"cores_per_host\": " << t.cores_per_host << ", \"one_machine\": " << (t.one_machine ? "true" : "false")
     << ", \"background_threads\": " << t.background_threads << "},\n";
  os << "  \"engine\": {\"cycle_overhead_s\": " << t.cycle_overhead_s << ", \"wake_s\": " << t.wake_s << "}";
  if (!t.stragglers.empty()) {
    os << ",\n  \"stragglers\": [";
    for (size_t i = 0; i < t.stragglers.size(); ++i)
      os << (i ? ", " : "") << "{\"rank\": " << t.stragglers[i].rank
         << ", \"compute_factor\": " << t.stragglers[i].compute_factor << "}";
    os << "]";
  }
  os << "\n}\n";
  return os.str();
}

}  // namespace cohort::sim
