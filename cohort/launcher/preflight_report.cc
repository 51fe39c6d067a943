#include "cohort/launcher/preflight_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "cohort/launcher/launch_template.h"

namespace cohort::launcher {
namespace {

// Ranks per gloo peer connection and the files a rank opens besides: what
// `ulimit -n` must allow (gloo opens one connection per peer pair and
// device; the store, the shm segment, logs and libraries take the rest).
constexpr long long kFilesBase = 256;
// Address space a rank maps besides its shm segment (libraries, heap,
// thread stacks) under `ulimit -v`.
constexpr double kAddressSpaceBase = 2.0 * (1ll << 30);
constexpr double kClockSkewWarning_s = 0.5;

constexpr double kKiB = 1 << 10, kMiB = 1 << 20, kGiB = 1 << 30;

// Binary units throughout, as ulimit and tmpfs count.
std::string bytes_text(double b) {
  char out[32];
  if (b < 0) return "unlimited";
  if (b >= kGiB) std::snprintf(out, sizeof out, "%.1fG", b / kGiB);
  else if (b >= kMiB) std::snprintf(out, sizeof out, "%.1fM", b / kMiB);
  else if (b >= kKiB) std::snprintf(out, sizeof out, "%.0fK", b / kKiB);
  else std::snprintf(out, sizeof out, "%.0f", b);
  return out;
}

// Whole MiB rounded up, as tmpfs' size= takes it (no fractions): "65M".
std::string whole_mib(double b) { return std::to_string((long long)std::ceil(b / kMiB)) + "M"; }

std::string rate_text(double bytes_per_s) {
  char out[32];
  if (!std::isfinite(bytes_per_s)) return "-";
  if (bytes_per_s >= 1e9) std::snprintf(out, sizeof out, "%.2f GB/s", bytes_per_s / 1e9);
  else std::snprintf(out, sizeof out, "%.1f MB/s", bytes_per_s / 1e6);
  return out;
}

std::string ms_text(double s, bool sign = false) {
  char out[32];
  std::snprintf(out, sizeof out, sign ? "%+.3f ms" : "%.3f ms", s * 1e3);
  return out;
}

std::string count(int n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string limit_text(double v) { return v == -1 ? "unlimited" : std::to_string((long long)v); }

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s + " ";
}

// The launch template's command that runs `true` on `host`, to try by hand.
std::string launch_true(const std::string& launch_template, const std::string& host) {
  return shell_join(LaunchTemplate(launch_template).expand(host, {"true"}));
}

struct Problem {
  std::string where, what, fix;
};

// The host's view assembled from its ranks.
struct HostView {
  std::string name;
  std::vector<const ProbeRank*> ranks;
  const ProbeRank* leader = nullptr;  // local rank 0 with facts
  bool all_facts = true;
};

std::string rank_range(const std::vector<const ProbeRank*>& ranks) {
  if (ranks.empty()) return "-";
  const int first = ranks.front()->rank, last = ranks.back()->rank;
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

const std::string* str(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->is_string() ? &f->string() : nullptr;
}

double num(const json::Value& v, const char* key, double fallback = 0) {
  const json::Value* f = v.find(key);
  return f && f->is_number() ? f->number() : fallback;
}

// The interface a launch's gloo listens on at `facts`' host, and why: the
// probe's net::listen_choice, the launch's own.
std::string launch_iface(const json::Value& facts, std::string* why) {
  const std::string *iface = str(facts, "launch_iface"), *reason = str(facts, "launch_iface_why");
  if (why) *why = reason ? *reason : "its probe did not say";
  return iface ? *iface : "";
}

std::vector<std::pair<std::string, std::string>> interfaces(const json::Value& facts) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json::Value& i : facts.at("interfaces").items())
    out.emplace_back(i.at("name").string(), i.at("address").string());
  return out;
}

// Reachability of host `to`'s interfaces from the leaders' links:
// ok[iface] = sources that reached it; errors[iface] = first error seen.
struct Reach {
  std::map<std::string, std::set<std::string>> ok;
  std::map<std::string, std::pair<std::string, std::string>> error;  // iface -> (from, error)
};

Reach reach_of(const std::vector<HostView>& hosts, const std::string& to) {
  Reach r;
  for (const HostView& h : hosts) {
    if (!h.leader || !h.leader->links) continue;
    for (const json::Value& t : h.leader->links->at("to").items()) {
      if (t.at("host").string() != to) continue;
      for (const json::Value& a : t.at("addresses").items()) {
        const std::string& iface = a.at("iface").string();
        if (a.at("ok").boolean()) r.ok[iface].insert(h.name);
        else if (!r.error.contains(iface)) r.error[iface] = {h.name, a.at("error").string()};
      }
    }
  }
  return r;
}

std::string firewall_rules(const std::string& ports_iptables, const std::string& ports_nft) {
  return "`iptables -I INPUT -p tcp --dport " + ports_iptables +
         " -j ACCEPT` (nftables: `nft insert rule inet filter input tcp dport " + ports_nft + " accept`)";
}

}  // namespace

bool excluded_interface(const std::string& name, std::string* why) {
  const char* reason = nullptr;
  if (name == "lo") reason = "loopback";
  else if (name.starts_with("docker")) reason = "a container bridge (docker)";
  else if (name.starts_with("veth")) reason = "one end of a container's veth pair";
  else if (name.starts_with("br-")) reason = "a container network's bridge";
  if (reason && why) *why = reason;
  return reason != nullptr;
}

std::string collectives_go(const CheckRun& run) {
  for (const ProbeRank& r : run.ranks) {
    if (!r.facts) return "not every host's probe answered";
    if (r.done && !r.done->empty()) return "a probe failed";
  }
  // Every leader reached every other host on the interface the launch uses
  // there, and /dev/shm holds each host's segment.
  std::map<std::string, const json::Value*> facts_of;
  for (const ProbeRank& r : run.ranks)
    if (r.facts->at("local_rank").number() == 0) facts_of[r.host] = &*r.facts;
  for (const ProbeRank& r : run.ranks) {
    const json::Value& f = *r.facts;
    if (run.backend != "gloo" && num(f, "shm_need") > num(f, "shm_free")) return "/dev/shm is too small on " + r.host;
    if (f.at("local_rank").number() != 0) continue;
    if (!r.links) return "the link probe of " + r.host + " did not report";
    for (const json::Value& t : r.links->at("to").items()) {
      const auto it = facts_of.find(t.at("host").string());
      if (it == facts_of.end()) continue;
      const std::string iface = launch_iface(*it->second, nullptr);
      bool ok = false;
      for (const json::Value& a : t.at("addresses").items())
        ok = ok || (a.at("iface").string() == iface && a.at("ok").boolean());
      if (!ok) return r.host + " cannot reach " + t.at("host").string() + " on " + iface;
    }
  }
  return "1";
}

CheckVerdict judge(const CheckRun& run) {
  std::ostringstream out;
  std::vector<Problem> problems;
  std::vector<std::string> warnings;

  std::vector<HostView> hosts;
  for (const std::string& name : run.hosts) hosts.push_back({.name = name});
  auto view_of = [&](const std::string& name) -> HostView& {
    for (HostView& h : hosts)
      if (h.name == name) return h;
    hosts.push_back({.name = name});
    return hosts.back();
  };
  for (const ProbeRank& r : run.ranks) {
    HostView& h = view_of(r.host);
    h.ranks.push_back(&r);
    h.all_facts = h.all_facts && r.facts.has_value();
    if (r.facts && r.facts->at("local_rank").number() == 0) h.leader = &r;
  }
  const bool multi_host = hosts.size() > 1;

  out << "cohortrun: check of " << count(run.num_ranks, "rank") << " on " << count(int(hosts.size()), "host")
      << ": store at " << run.store_address << ":" << run.store_port << " on " << run.store_host
      << " (this machine), backend " << run.backend << ", cohortrun build " << run.build_id << " ("
      << run.build_description << "), probe " << run.probe_path << ", " << std::fixed;
  out.precision(1);
  out << run.seconds << " s\n\n";

  if (!run.store_port_error.empty())
    problems.push_back({run.store_host + " (the store host)",
                        "the store port " + std::to_string(run.store_port_wanted) + " is taken on the store host " +
                            run.store_host + ": " + run.store_port_error,
                        "pass a free --port (or --port 0 for any); `ss -ltnp 'sport = :" +
                            std::to_string(run.store_port_wanted) + "'` shows which process holds it"});

  // Launch and store reachability: the first rank of a host that failed
  // speaks for the host (its others fail alike).
  std::set<std::string> launch_reported;
  for (const ProbeRank& r : run.ranks) {
    if (r.facts || !launch_reported.insert(r.host).second) continue;
    std::string last;
    for (auto it = r.output.rbegin(); it != r.output.rend() && last.empty(); ++it)
      if (!it->empty()) last = *it;
    bool store_line = false;
    for (const std::string& l : r.output)
      store_line = store_line || l.find("cannot reach the job's store") != std::string::npos;
    const std::string where = r.host;
    if (!r.spawn_error.empty()) {
      const bool probe = r.spawn_error.find(run.probe_path) != std::string::npos;
      problems.push_back({where, "the launch of rank " + std::to_string(r.rank) + " failed here: " + r.spawn_error,
                          probe ? "install cohort-probe beside cohortrun (cmake --install puts them together), or "
                                  "pass --check-probe PATH"
                                : "install the launch template's program on this machine, or pass --launch-template"});
    } else if (r.done && !r.done->empty()) {
      problems.push_back({where, "rank " + std::to_string(r.rank) + "'s probe failed before it reported: " + *r.done,
                          "rerun the check; if it fails again, run the job with COHORT_LOG_LEVEL=debug"});
    } else if (store_line) {
      const std::string port = std::to_string(run.store_port);
      problems.push_back({where,
                          "cannot reach the store at " + run.store_address + ":" + port + " (rank " +
                              std::to_string(r.rank) + ": " + last + ")",
                          "open TCP port " + port + " on the store host " + run.store_host + ": " +
                              firewall_rules(port, port) + "; if it is open there, a firewall on " + where +
                              " or on the way drops it (`nft list ruleset`, " + "`iptables -S OUTPUT` on " + where +
                              "), or " + run.store_address +
                              " is not routed from there (pass --store-addr with an address " + where + " reaches)"});
    } else if (r.timed_out) {
      problems.push_back({where,
                          "rank " + std::to_string(r.rank) + "'s probe did not report before the check's deadline" +
                              (last.empty() ? std::string() : " (last said: " + last + ")"),
                          "check that the launch returns without a prompt: `" +
                              launch_true(run.launch_template, where) + "` by hand"});
    } else if (r.exited && r.exit_code == 127) {
      problems.push_back({where,
                          "a program of the launch was not found (rank " + std::to_string(r.rank) + ": " + last + ")",
                          "install this cohort build at the same paths on " + where + " (cohortrun, and " +
                              run.probe_path + "), or pass --remote-cohortrun and --check-probe"});
    } else {
      problems.push_back({where,
                          "the launch of rank " + std::to_string(r.rank) + " failed" +
                              (r.exited ? " (exit " + std::to_string(r.exit_code) + ")" : std::string()) +
                              (last.empty() ? std::string() : ": " + last),
                          "run the launch by hand: `" + launch_true(run.launch_template, where) +
                              "` must succeed without a prompt (for ssh: keys, known_hosts)"});
    }
  }
  for (const ProbeRank& r : run.ranks)
    if (r.facts && r.done && !r.done->empty())
      problems.push_back({r.host, "rank " + std::to_string(r.rank) + "'s probe failed: " + *r.done,
                          "rerun the check; if it fails again, run the job with COHORT_LOG_LEVEL=debug"});

  // The per-host table.
  out << pad("host", 16) << pad("ranks", 6) << pad("launch", 7) << pad("build", 17) << pad("libtorch", 9)
      << pad("interface", 22) << pad("/dev/shm free/need", 19) << pad("nofile", 9) << pad("memlock", 10)
      << pad("as (-v)", 10) << "clock\n";
  // Clock offsets from the first host's leader.
  std::map<std::string, double> offsets;
  if (!hosts.empty() && hosts.front().leader && hosts.front().leader->links) {
    offsets[hosts.front().name] = 0;
    for (const json::Value& t : hosts.front().leader->links->at("to").items())
      if (t.find("offset_s")) offsets[t.at("host").string()] = t.at("offset_s").number();
    // A host the first cannot reach: its own view of the first, reversed.
    for (const HostView& h : hosts)
      if (!offsets.contains(h.name) && h.leader && h.leader->links)
        for (const json::Value& t : h.leader->links->at("to").items())
          if (t.at("host").string() == hosts.front().name && t.find("offset_s"))
            offsets[h.name] = -t.at("offset_s").number();
  }
  for (const HostView& h : hosts) {
    const json::Value* f = h.leader ? &*h.leader->facts : nullptr;
    if (!f)
      for (const ProbeRank* r : h.ranks)
        if (r->facts) f = &*r->facts;
    std::string iface = "-", shm = "-", nofile = "-", memlock = "-", as = "-", build = "-", torch = "-";
    if (f) {
      const std::string name = launch_iface(*f, nullptr);
      std::string address;
      for (const auto& [n, a] : interfaces(*f))
        if (n == name) address = a;
      iface = name.empty() ? "?" : name + " " + address;
      shm = bytes_text(num(*f, "shm_free")) + " / " + bytes_text(num(*f, "shm_need"));
      nofile = limit_text(num(*f, "nofile"));
      memlock = num(*f, "memlock") < 0 ? "unlimited" : bytes_text(num(*f, "memlock"));
      as = num(*f, "address_space") < 0 ? "unlimited" : bytes_text(num(*f, "address_space"));
      build = *str(*f, "build_id");
      torch = *str(*f, "libtorch");
    }
    const std::string clock = offsets.contains(h.name) ? ms_text(offsets[h.name], true) : "-";
    out << pad(h.name, 16) << pad(rank_range(h.ranks), 6) << pad(h.all_facts ? "ok" : "FAILED", 7) << pad(build, 17)
        << pad(torch, 9) << pad(iface, 22) << pad(shm, 19) << pad(nofile, 9) << pad(memlock, 10) << pad(as, 10) << clock
        << "\n";
  }

  // Per-host facts judged: build, /dev/shm, limits.
  const bool uses_shm = run.backend != "gloo" && run.backend != "mpi";
  double most_shm = 0;
  for (const ProbeRank& r : run.ranks)
    if (r.facts) most_shm = std::max(most_shm, num(*r.facts, "shm_need"));
  out << "needed by a rank of this job: nofile >= " << kFilesBase + 4ll * run.num_ranks
      << ", as (-v) >= " << bytes_text(most_shm + kAddressSpaceBase)
      << " or unlimited, /dev/shm free >= its host's need"
      << (uses_shm ? "" : " (not with --backend " + run.backend + ")")
      << "; memlock: any (cohort's TCP and shm transports pin no memory)\n";
  for (const HostView& h : hosts) {
    std::set<std::string> said;
    for (const ProbeRank* r : h.ranks) {
      if (!r->facts) continue;
      const json::Value& f = *r->facts;
      const std::string& id = *str(f, "build_id");
      if ((id != run.build_id || *str(f, "libtorch") != run.libtorch) && said.insert("build").second)
        problems.push_back({h.name,
                            "runs cohort build " + id + " (" + *str(f, "build") + ", LibTorch " + *str(f, "libtorch") +
                                ") where cohortrun is build " + run.build_id + " (" + run.build_description +
                                ", LibTorch " + run.libtorch + ")",
                            "install the same cohort build on every host (the same commit, compiler, flags and "
                            "LibTorch), at " +
                                run.probe_path + " for the check"});
      const double need = num(f, "shm_need"), free = num(f, "shm_free");
      if (uses_shm && need > free && said.insert("shm").second)
        problems.push_back({h.name,
                            "/dev/shm has " + bytes_text(free) + " free, the shm segment of its " +
                                std::to_string(int(num(f, "local_size"))) + " ranks needs " + bytes_text(need) +
                                " (a rank writing past it dies of SIGBUS)",
                            "enlarge /dev/shm on " + h.name +
                                ": `mount -o remount,size=" + whole_mib(std::max(need * 2, 64 * kMiB)) +
                                " /dev/shm` (in a container: docker run --shm-size), or run fewer ranks per host"});
      const double nofile = num(f, "nofile");
      const long long files = kFilesBase + 4ll * run.num_ranks;
      if (nofile >= 0 && nofile < files && said.insert("nofile").second)
        problems.push_back({h.name,
                            "ulimit -n is " + limit_text(nofile) + ", a rank of " + std::to_string(run.num_ranks) +
                                " opens up to " + std::to_string(files) +
                                " descriptors (peer connections, store, segment)",
                            "raise it to " + std::to_string(files) + " or more: `ulimit -n " + std::to_string(files) +
                                "` in the login shell, or nofile in /etc/security/limits.conf"});
      const double as = num(f, "address_space");
      if (as >= 0 && as < need + kAddressSpaceBase && said.insert("as").second)
        problems.push_back({h.name,
                            "ulimit -v is " + bytes_text(as) + ", below the " + bytes_text(need + kAddressSpaceBase) +
                                " a rank maps (its shm segment " + bytes_text(need) + ", libraries, heap, threads)",
                            "raise it (`ulimit -v unlimited`, or as in /etc/security/limits.conf)"});
    }
  }

  // Interfaces: the one each host's launch uses, and why others are not.
  if (multi_host) {
    out << "\ninterfaces (what gloo listens on; every other host must reach it):\n";
    for (const HostView& h : hosts) {
      if (!h.leader) continue;
      const json::Value& f = *h.leader->facts;
      std::string why;
      const std::string used = launch_iface(f, &why);
      const Reach reach = reach_of(hosts, h.name);
      std::set<std::string> others;
      for (const HostView& o : hosts)
        if (o.name != h.name && o.leader && o.leader->links) others.insert(o.name);
      auto routes_all = [&](const std::string& iface) {
        const auto it = reach.ok.find(iface);
        return it != reach.ok.end() && it->second == others;
      };
      const auto ifaces = interfaces(f);
      size_t usable = 0;
      for (const auto& [n, a] : ifaces) usable += !excluded_interface(n);
      std::vector<std::string> notes, routing;
      bool has_used = false;
      for (const auto& [n, a] : ifaces) {
        has_used = has_used || n == used;
        std::string excluded;
        if (n == used) continue;
        if (excluded_interface(n, &excluded) && (usable > 0 || n == "lo")) {
          // Loopback reaches no other host; container interfaces are left
          // out of what the check suggests (the launch's own choice, the
          // route to the store, may still be one).
          notes.push_back(n + " (" + excluded + (n == "lo" ? ")" : "; not considered by the check)"));
        } else if (routes_all(n)) {
          routing.push_back(n);
          notes.push_back(n + " (also routes; the launch uses " + used + ")");
        } else {
          const auto e = reach.error.find(n);
          notes.push_back(n + " (" +
                          (e == reach.error.end() ? std::string("not reached")
                                                  : "not reached from " + e->second.first + ": " + e->second.second) +
                          ")");
        }
      }
      const bool ok = has_used && routes_all(used);
      out << "  " << h.name << ": " << (used.empty() ? std::string("none") : used) << " "
          << (others.empty() ? "not checked (" + why + "; no other host's probe answered)"
              : ok           ? "chosen (" + why + "; reaches every host)"
                             : "FAILS (" + why + ")");
      if (!notes.empty()) {
        out << "; rejected: ";
        for (size_t i = 0; i < notes.size(); ++i) out << (i ? ", " : "") << notes[i];
      }
      out << "\n";
      if (ok || others.empty()) continue;
      const int port = int(num(f, "listen_port"));
      const std::string range = std::to_string(int(f.at("port_range").items().at(0).number())) + ":" +
                                std::to_string(int(f.at("port_range").items().at(1).number()));
      std::string range_nft = range;
      range_nft[range.find(':')] = '-';
      if (reach.ok.empty()) {
        // Nothing reached it on any address, while it itself got through to
        // the store: its incoming ports are filtered.
        const auto e = reach.error.begin();
        problems.push_back(
            {h.name,
             "its data-plane ports are blocked: no host could connect to its probe's port " + std::to_string(port) +
                 " on any interface" +
                 (e == reach.error.end() ? std::string() : " (" + e->second.first + ": " + e->second.second + ")") +
                 "; gloo listens on a port of the range " + range_nft + " there",
             "open the range on " + h.name + ": " + firewall_rules(range, range_nft)});
      } else if (!has_used) {
        std::string names;
        for (const auto& [n, a] : ifaces) names += (names.empty() ? "" : ", ") + n;
        problems.push_back({h.name, "has no interface " + used + " with an IPv4 address (it has " + names + ")",
                            routing.empty() ? "pass --network-interface with an interface every host has"
                                            : "pass --network-interface " + routing.front()});
      } else {
        const auto e = reach.error.find(used);
        problems.push_back(
            {h.name,
             "the launch would use " + used + " (" + why + "), which does not route from every host" +
                 (e == reach.error.end() ? std::string() : ": " + e->second.first + " got '" + e->second.second + "'"),
             routing.empty()
                 ? "route " + used + " between the hosts, or pass --network-interface with one that does"
                 : "pass --network-interface " + routing.front() + " (it reaches " + h.name + " from every host)"});
      }
    }
  }

  // Links: each pair of hosts, and inside each host.
  out << "\nlinks (TCP between the hosts' probes; latency is half the shortest round trip):\n";
  out << "  " << pad("from", 16) << pad("to", 16) << pad("reach", 18) << pad("latency", 11) << pad("bandwidth", 12)
      << "clock offset\n";
  double worst_skew = 0;
  std::string skew_pair;
  for (const HostView& h : hosts) {
    if (!h.leader || !h.leader->links) continue;
    const json::Value& links = *h.leader->links;
    for (const json::Value& t : links.at("to").items()) {
      std::string reach = "unreachable";
      if (const std::string* m = str(t, "measured_iface")) reach = "ok on " + *m;
      else if (const std::string* e = str(t, "measure_error")) reach = "broke: " + *e;
      out << "  " << pad(h.name, 16) << pad(t.at("host").string(), 16) << pad(reach, 18);
      if (t.find("latency_s")) {
        const double offset = num(t, "offset_s");
        out << pad(ms_text(num(t, "latency_s")), 11) << pad(rate_text(num(t, "bytes_per_s")), 12)
            << ms_text(offset, true);
        if (std::abs(offset) > worst_skew) {
          worst_skew = std::abs(offset);
          skew_pair = h.name + " and " + t.at("host").string();
        }
      } else {
        out << pad("-", 11) << pad("-", 12) << "-";
      }
      out << "\n";
    }
    if (const json::Value* loop = links.find("loopback"))
      out << "  " << pad(h.name, 16) << pad("(same host)", 16) << pad("ok on lo", 18)
          << pad(ms_text(num(*loop, "latency_s")), 11) << pad(rate_text(num(*loop, "bytes_per_s")), 12) << "\n";
  }
  if (worst_skew > kClockSkewWarning_s)
    warnings.push_back(
        "the clocks of " + skew_pair + " differ by " + ms_text(worst_skew) +
        ": timelines and telemetry of different hosts will not line up (run chrony or ntpd on every host)");

  // Collectives.
  out << "\ncollectives (an allreduce of 1000 floats, checked against its closed form):\n";
  if (run.go != "1") {
    out << "  skipped: " << run.go << "\n";
  } else {
    std::map<std::string, std::vector<std::string>> lines;  // backend -> results
    std::map<std::string, std::set<std::string>> seen;
    for (const ProbeRank& r : run.ranks) {
      if (!r.collectives) continue;
      for (const json::Value& c : r.collectives->at("runs").items()) {
        const std::string backend = c.at("backend").string(), scope = c.at("scope").string();
        if (const std::string* skipped = str(c, "skipped"); skipped && !skipped->empty()) {
          if (seen[backend].insert(scope + "/skipped").second)
            lines[backend].push_back((scope == "all" ? "" : scope + ": ") + "skipped (" + *skipped + ")");
          continue;
        }
        if (c.at("ok").boolean()) {
          if (seen[backend].insert(scope + "/ok").second)
            lines[backend].push_back((scope == "all" ? "" : scope + ": ") + std::to_string(int(num(c, "ranks"))) +
                                     " ranks ok");
          continue;
        }
        const std::string error = c.at("error").string().empty()
                                      ? std::to_string((long long)num(c, "wrong")) + " wrong elements"
                                      : c.at("error").string();
        if (seen[backend].insert(scope + "/failed").second) {
          lines[backend].push_back((scope == "all" ? "" : scope + ": ") + "FAILED on rank " + std::to_string(r.rank) +
                                   ": " + error);
          const bool used =
              backend == run.backend || (run.backend == "auto" && (backend == "hierarchical" || backend == "shm"));
          problems.push_back({scope == "all" ? r.host : scope, "the " + backend + " allreduce failed: " + error,
                              used ? "rerun the check with COHORT_LOG_LEVEL=debug exported to see where; another "
                                     "--backend avoids this one"
                                   : "only matters with --backend " + backend});
        }
      }
    }
    for (const char* b : {"shm", "gloo", "hierarchical"}) {
      if (!lines.contains(b)) continue;
      out << "  " << pad(b, 13);
      for (size_t i = 0; i < lines[b].size(); ++i) out << (i ? "; " : "") << lines[b][i];
      out << "\n";
    }
  }
  bool mpi_built = false;
  for (const ProbeRank& r : run.ranks)
    if (r.facts)
      for (const json::Value& b : r.facts->at("backends").items()) mpi_built = mpi_built || b.string() == "mpi";
  out << "  " << pad("mpi", 13)
      << (mpi_built ? "built; not checked (MPI jobs start under mpirun or srun, not cohortrun)" : "not built") << "\n";

  // The topology.
  if (!run.topology.empty()) {
    out << "\ntopology";
    if (!run.topology_file.empty()) out << " written to " << run.topology_file << " (cohort-sim predict --topology)";
    out << ":";
    try {
      const json::Value t = json::parse(run.topology, "topology");
      const json::Value& links = t.at("links");
      for (const char* link : {"shm", "intra", "network"})
        if (const json::Value* l = links.find(link); l && l->find("bytes_per_s"))
          out << " " << link << " " << ms_text(num(*l, "alpha_s")) << " + " << rate_text(num(*l, "bytes_per_s")) << ";";
    } catch (const std::exception& e) {
      out << " (unreadable: " << e.what() << ")";
    }
    out << "\n";
    if (run.fit)
      for (const auto& [key, value] : run.fit->members()) {
        if (const std::string* error = str(value, "error")) {
          out << "  " << key << " not fitted (" << *error
              << "): " << (key == "network" ? "the pairs' slowest measurement" : "unbounded") << "\n";
          continue;
        }
        char line[200];
        std::snprintf(line, sizeof line, "  %s fitted to the %s at %d sizes: rms error %.0f%%, max %.0f%%\n",
                      key.c_str(), str(value, "collective")->c_str(), int(num(value, "points")),
                      100 * num(value, "rms"), 100 * num(value, "max"));
        out << line;
      }
  } else if (!run.topology_file.empty() || !run.topology_error.empty()) {
    out << "\ntopology: not written ("
        << (run.topology_error.empty() ? "the collectives did not run" : run.topology_error) << ")\n";
  }
  if (!run.topology_error.empty() && !run.topology.empty()) warnings.push_back("topology: " + run.topology_error);

  if (!problems.empty()) {
    out << "\nproblems:\n";
    for (size_t i = 0; i < problems.size(); ++i)
      out << "  " << i + 1 << ". " << problems[i].where << ": " << problems[i].what << "\n     fix: " << problems[i].fix
          << "\n";
  }
  if (!warnings.empty()) {
    out << "\nwarnings:\n";
    for (const std::string& w : warnings) out << "  - " << w << "\n";
  }
  out << "\ncohortrun: check: a launch of " << count(run.num_ranks, "rank") << " on "
      << count(int(hosts.size()), "host") << " would ";
  if (problems.empty()) out << "work\n";
  else out << "fail: " << problems.size() << " problem" << (problems.size() == 1 ? "" : "s") << "\n";
  return {out.str(), int(problems.size())};
}

}  // namespace cohort::launcher
