// cohort-probe: the program `cohortrun --check` starts on every slot of the
// job it checks, through the same launch path as the job's ranks (launch
// template, payload, store, rank environment). It reports its host's facts,
// the reachability and measured links between hosts, and tiny allreduces on
// each backend into the job's store, in the sequence of
// cohort/launcher/preflight_protocol.h; cohortrun gathers and judges. Rank 0
// also fits the simulator's topology (tools/sim) to the measured allreduces.
//
//   cohort-probe --cohortrun-check   (started by cohortrun --check only)
//   cohort-probe --build-id          prints this build's id and exits
//
// It prints nothing on success and always exits 0 once it could reach the
// store (what went wrong is in the store for cohortrun to report), 1 when it
// could not, 2 on bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cohort/comm/create.h"
#include "cohort/comm/shm/segment.h"
#include "cohort/common/build_id.h"
#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/common/host_key.h"
#include "cohort/common/json.h"
#include "cohort/common/json_object.h"
#include "cohort/common/tunables.h"
#include "cohort/launcher/preflight_protocol.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"
#include "tools/probe/host_facts.h"
#include "tools/probe/link_probe.h"
#include "tools/sim/calibration.h"
#include "tools/sim/topology.h"

namespace {

using namespace cohort;
using namespace cohort::launcher::preflight;
using namespace std::chrono_literals;

// The sequence's waits: generous, since cohortrun ends the probes anyway
// when a check takes too long.
constexpr auto kPhaseTimeout = 120s;
constexpr double kConnectTimeout = 1.0;  // seconds for one address of a peer
constexpr int kPings = 20;
constexpr int kTransfers = 2;
constexpr size_t kTransferBytes = 4 << 20;
// The collectives' own timeout: a backend that cannot form fails this fast.
constexpr auto kCollectiveTimeout = 30s;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Peer {
  int rank = 0;
  std::string host;
  int port = 0;
  std::vector<std::pair<std::string, std::string>> interfaces;  // name, address
  std::string launch_iface;                                     // what the launch's gloo would listen on there
};

Peer read_peer(const json::Value& facts) {
  Peer p;
  p.rank = int(facts.at("rank").number());
  p.host = facts.at("host").string();
  p.port = int(facts.at("listen_port").number());
  for (const json::Value& i : facts.at("interfaces").items())
    p.interfaces.emplace_back(i.at("name").string(), i.at("address").string());
  p.launch_iface = facts.at("launch_iface").string();
  return p;
}

// A measured link's fields, exact: the topology is fitted from them.
JsonObject& add_measure(JsonObject& o, const probe::LinkMeasure& m) {
  return o.add("latency_s", m.latency_s, 17).add("bytes_per_s", m.bytes_per_s, 17).add("offset_s", m.offset_s, 17);
}

// A host leader's link phase: every other host's listener on each of its
// addresses, the launch's interface measured; and this host's loopback.
std::string probe_links(const rendezvous::LaunchInfo& info, const std::vector<Peer>& leaders, int my_port,
                        const std::string& my_host) {
  std::vector<std::string> to;
  for (const Peer& peer : leaders) {
    if (peer.rank == info.rank || peer.host == my_host) continue;
    JsonObject link;
    link.add("rank", peer.rank).add("host", peer.host);
    std::string measure_address, measure_iface;
    std::vector<std::string> addresses;
    for (const auto& [name, address] : peer.interfaces) {
      if (address.starts_with("127.")) continue;
      std::string error;
      const int fd = probe::connect_within(address, peer.port, kConnectTimeout, error);
      if (fd >= 0) {
        ::close(fd);
        if (measure_address.empty() || name == peer.launch_iface) {
          measure_address = address;
          measure_iface = name;
        }
      }
      addresses.push_back(
          JsonObject().add("iface", name).add("address", address).add("ok", fd >= 0).add("error", error).str());
    }
    link.add_raw("addresses", json_array(addresses));
    if (!measure_address.empty()) {
      std::string error;
      const int fd = probe::connect_within(measure_address, peer.port, kConnectTimeout, error);
      try {
        if (fd < 0) COHORT_THROW(Error) << error;
        const probe::LinkMeasure m = probe::measure_link(fd, kPings, kTransfers, kTransferBytes);
        add_measure(link.add("measured_iface", measure_iface), m);
      } catch (const Error& e) {
        link.add("measure_error", e.what());
      }
      if (fd >= 0) ::close(fd);
    }
    to.push_back(link.str());
  }
  JsonObject out;
  out.add("rank", info.rank).add_raw("to", json_array(to));
  std::string error;
  const int fd = probe::connect_within("127.0.0.1", my_port, kConnectTimeout, error);
  if (fd >= 0) {
    try {
      JsonObject loopback;
      out.add_raw("loopback", add_measure(loopback, probe::measure_link(fd, kPings, kTransfers, kTransferBytes)).str());
    } catch (const Error&) {
    }
    ::close(fd);
  }
  return out.str();
}

// Checks an allreduce's result against its closed form: rank r gives
// (r + 1) * (i % 7 + 1), the sum is (i % 7 + 1) * size * (size + 1) / 2.
long long wrong_elements(comm::Communicator& c) {
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float((c.rank() + 1) * int(i % 7 + 1));
  c.allreduce(BufferView{data.data(), data.size(), DType::f32});
  long long wrong = 0;
  const double n = c.size();
  for (size_t i = 0; i < data.size(); ++i) wrong += data[i] != float(double(i % 7 + 1) * n * (n + 1) / 2);
  return wrong;
}

// The allreduce's time per call at each size, the largest over ranks (as
// cohort-bench reports it), the median of three loops.
std::vector<sim::Sample> time_allreduce(comm::Communicator& c, const std::vector<size_t>& sizes) {
  std::vector<sim::Sample> samples;
  for (size_t bytes : sizes) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const BufferView view{data.data(), data.size(), DType::f32};
    double t0 = now_s();
    for (int i = 0; i < 2; ++i) c.allreduce(view);  // warm-up; also sizes the timed loop
    double warm = (now_s() - t0) / 2;
    c.allreduce(BufferView{&warm, 1, DType::f64}, {.op = ReduceOp::max});
    // The median of three timed loops of about 0.1 s: one loop disturbed
    // by another program on a shared machine does not set the fit.
    const int iters = std::clamp(int(0.1 / std::max(warm, 1e-6)), 3, 200);
    double loops[3];
    for (double& per_call : loops) {
      c.barrier();
      t0 = now_s();
      for (int i = 0; i < iters; ++i) c.allreduce(view);
      per_call = (now_s() - t0) / iters;
      c.allreduce(BufferView{&per_call, 1, DType::f64}, {.op = ReduceOp::max});
    }
    std::sort(std::begin(loops), std::end(loops));
    samples.push_back({double(bytes), loops[1]});
  }
  return samples;
}

struct BackendRun {
  std::string backend;
  std::string scope;  // "all" or the host of an shm group
  int ranks = 0;
  bool ok = false;
  long long wrong = 0;
  std::string error;
  std::string skipped;  // why it did not run
  std::vector<sim::Sample> samples;
};

BackendRun run_backend(std::shared_ptr<rendezvous::Store> store, const std::string& backend, const std::string& scope,
                       int rank, int size, comm::CommunicatorOptions options, bool timed) {
  BackendRun run{.backend = backend, .scope = scope, .ranks = size};
  options.backend = backend;
  options.job_id += "-" + backend;
  options.timeout = kCollectiveTimeout;
  try {
    auto prefixed =
        std::make_shared<rendezvous::PrefixStore>(std::string(kCollectivesPrefix) + backend + "/" + scope + "/", store);
    auto c = comm::create_communicator(prefixed, rank, size, options);
    run.wrong = wrong_elements(*c);
    if (timed) run.samples = time_allreduce(*c, {64 << 10, 256 << 10, 1 << 20, 4 << 20});
    c->barrier();
    run.ok = run.wrong == 0;
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  return run;
}

std::string runs_json(int rank, const std::vector<BackendRun>& runs) {
  std::vector<std::string> items;
  for (const BackendRun& r : runs) {
    std::vector<std::string> samples;
    for (const sim::Sample& sample : r.samples)
      samples.push_back(json_array({json_number(sample.bytes, 17), json_number(sample.seconds, 17)}));
    items.push_back(JsonObject()
                        .add("backend", r.backend)
                        .add("scope", r.scope)
                        .add("ranks", r.ranks)
                        .add("ok", r.ok)
                        .add("wrong", int64_t(r.wrong))
                        .add("error", r.error)
                        .add("skipped", r.skipped)
                        .add_raw("samples", json_array(samples))
                        .str());
  }
  return JsonObject().add("rank", rank).add_raw("runs", json_array(items)).str();
}

// Rank 0: the simulator's topology from the measured allreduces (the shm
// link from one host's shm group, the network link from the launch's
// cross-host backend) and the loopback link; where a fit is impossible, the
// link probe's measurement.
std::string fit_json(const std::string& collective, const sim::LinkFit& fit) {
  return JsonObject()
      .add("collective", collective)
      .add("points", int64_t(fit.points))
      .add("rms", fit.rms_relative_error)
      .add("max", fit.max_relative_error)
      .str();
}

// A shm link from allreduce samples that no fit allows: alpha the smallest
// time, the bandwidth the largest allreduce's bus bandwidth (2 (p - 1) / p
// of its bytes over its time beyond alpha, or over its whole time).
sim::Link rough_shm_link(const std::vector<sim::Sample>& samples, int ranks) {
  const auto [smallest, largest] = std::minmax_element(
      samples.begin(), samples.end(), [](const sim::Sample& a, const sim::Sample& b) { return a.bytes < b.bytes; });
  const double moved = 2.0 * (ranks - 1) / ranks * largest->bytes;
  const double beyond = largest->seconds - smallest->seconds;
  return {.alpha_s = smallest->seconds, .bytes_per_s = moved / (beyond > 0 ? beyond : largest->seconds)};
}

std::string fit_topology(const std::vector<json::Value>& facts, const json::Value* my_links,
                         const std::vector<BackendRun>& runs, const std::string& cross_backend, int hosts,
                         std::string& fits) {
  JsonObject fit_parts;
  sim::Topology t;
  t.hosts = hosts;
  t.ranks_per_host = int(facts.at(0).at("local_size").number());
  t.cores_per_host = int(facts.at(0).at("cores").number());
  bool one_machine = hosts > 1;
  for (const json::Value& f : facts)
    one_machine = one_machine && f.at("boot_id").string() == facts.at(0).at("boot_id").string();
  t.one_machine = one_machine;
  if (my_links)
    if (const json::Value* loop = my_links->find("loopback"))
      t.intra = {.alpha_s = loop->at("latency_s").number(), .bytes_per_s = loop->at("bytes_per_s").number()};
  for (const BackendRun& r : runs)
    if (r.backend == "shm" && r.samples.size() >= 2 && t.ranks_per_host > 1) {
      sim::Topology one = t;
      one.hosts = 1;
      try {
        const sim::LinkFit fit = sim::fit_link(one, sim::Algorithm::shm, sim::LinkClass::shm, r.samples);
        t.shm = fit.link;
        fit_parts.add_raw("shm", fit_json("shm allreduce", fit));
      } catch (const ConfigError& e) {
        // Timings too noisy to fit (a loaded machine): the largest
        // allreduce's bus bandwidth and the smallest's time, so that the
        // topology still holds a link the simulator can use.
        t.shm = rough_shm_link(r.samples, t.ranks_per_host);
        fit_parts.add_raw(
            "shm",
            JsonObject().add("error", e.what()).add("estimated", "from the largest and the smallest allreduce").str());
      }
    }
  if (hosts > 1) {
    // The measured pairs: the slowest one bounds a ring; the fit below
    // replaces it where the allreduce was timed.
    double latency = 0, bandwidth = sim::kInfinity;
    if (my_links)
      for (const json::Value& to : my_links->at("to").items())
        if (to.find("bytes_per_s")) {
          latency = std::max(latency, to.at("latency_s").number());
          bandwidth = std::min(bandwidth, to.at("bytes_per_s").number());
        }
    t.network = {.alpha_s = latency, .bytes_per_s = bandwidth};
    for (const BackendRun& r : runs)
      if (r.backend == cross_backend && r.samples.size() >= 2) {
        const sim::Algorithm a = cross_backend == "gloo" ? sim::Algorithm::ring : sim::Algorithm::hierarchical;
        try {
          const sim::LinkFit fit = sim::fit_link(t, a, sim::LinkClass::network, r.samples);
          t.network = fit.link;
          fit_parts.add_raw("network", fit_json(cross_backend + " allreduce", fit));
        } catch (const ConfigError& e) {
          // Keep the pairs' measurement.
          fit_parts.add_raw("network", JsonObject().add("error", e.what()).str());
        }
      }
  }
  fits = fit_parts.str();
  return sim::topology_json(t);
}

int run_probe() {
  const rendezvous::LaunchInfo info = rendezvous::discover();
  std::shared_ptr<rendezvous::Store> store;
  try {
    store = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
        .host = info.store_host, .port = info.store_port, .secret = info.secret, .connect_timeout = 15s});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-probe: cannot reach the job's store at %s:%d: %s\n", info.store_host.c_str(),
                 info.store_port, e.what());
    return 1;
  }
  try {
    const bool leader = info.local_rank == 0;
    std::unique_ptr<probe::LinkListener> listener;
    if (leader) listener = std::make_unique<probe::LinkListener>();
    const size_t shm_need =
        info.local_size > 1
            ? comm::shm::Geometry::for_group(info.local_size, size_t(tunables::shm_slot_bytes())).total_bytes()
            : 0;
    store->set(facts_key(info.rank), probe::host_facts_json(info, listener ? listener->port() : 0, shm_need));

    // The ranks present (cohortrun's roster), their facts.
    std::vector<int> present;
    {
      std::istringstream roster(store->get(kRosterKey, kPhaseTimeout));
      for (std::string r; std::getline(roster, r, ',');)
        if (!r.empty()) present.push_back(std::stoi(r));
    }
    std::vector<json::Value> facts;
    std::vector<Peer> leaders;
    std::set<std::string> hosts;
    for (int r : present) {
      facts.push_back(json::parse(store->get(facts_key(r), kPhaseTimeout), facts_key(r)));
      Peer p = read_peer(facts.back());
      hosts.insert(p.host);
      if (facts.back().at("local_rank").number() == 0) leaders.push_back(std::move(p));
    }
    const std::string my_host = net::host_label();  // as its facts say (host_facts.cc)
    std::string my_links;
    if (leader) {
      my_links = probe_links(info, leaders, listener->port(), my_host);
      store->set(links_key(info.rank), my_links);
    }

    const std::string go = store->get(kGoKey, kPhaseTimeout);
    if (go == "1") {
      comm::CommunicatorOptions options = comm::options_from_env();
      options.job_id = info.job_id + "-check";
      options.launch_source = rendezvous::LaunchSource::cohortrun;
      options.store_host = info.store_host;
      options.all_local = hosts.size() == 1;
      const std::string launch_backend = comm::resolve_backend(options);  // what the job would use
      const std::string cross_backend = hosts.size() > 1 ? (launch_backend == "gloo" ? "gloo" : "hierarchical") : "";
      const auto available = comm::available_backends();
      const auto built = [&](const char* b) {
        return std::find(available.begin(), available.end(), b) != available.end();
      };
      // A /dev/shm too small for a host's segment would kill its ranks with
      // SIGBUS (cohortrun says go with one only under --backend gloo): the
      // backends that use it are skipped, alike on every rank.
      std::string small_shm, my_small_shm;
      for (const json::Value& f : facts)
        if (f.at("shm_need").number() > f.at("shm_free").number()) {
          small_shm = f.at("host").string();
          if (small_shm == my_host) my_small_shm = small_shm;
        }
      std::vector<BackendRun> runs;
      const auto skip = [](const char* backend, const std::string& scope, int ranks, const std::string& host) {
        return BackendRun{
            .backend = backend, .scope = scope, .ranks = ranks, .skipped = "/dev/shm too small on " + host};
      };
      if (info.local_size > 1)
        runs.push_back(my_small_shm.empty()
                           ? run_backend(store, "shm", my_host, info.local_rank, info.local_size, options,
                                         /*timed=*/my_host == read_peer(facts.at(0)).host)
                           : skip("shm", my_host, info.local_size, my_host));
      if (built("gloo"))
        runs.push_back(run_backend(store, "gloo", "all", info.rank, info.size, options, cross_backend == "gloo"));
      if (built("hierarchical"))
        runs.push_back(small_shm.empty() ? run_backend(store, "hierarchical", "all", info.rank, info.size, options,
                                                       cross_backend == "hierarchical")
                                         : skip("hierarchical", "all", info.size, small_shm));
      store->set(collectives_key(info.rank), runs_json(info.rank, runs));
      if (info.rank == 0) {
        std::unique_ptr<json::Value> links;
        if (!my_links.empty()) links = std::make_unique<json::Value>(json::parse(my_links));
        std::string fits;
        store->set(kTopologyKey, fit_topology(facts, links.get(), runs, cross_backend, int(hosts.size()), fits));
        store->set(kFitKey, fits);
      }
    }
    // Every leader serves its listener until every rank is through.
    store->set(done_key(info.rank), "");
    std::vector<std::string> done;
    for (int r : present) done.push_back(done_key(r));
    store->wait(done, kPhaseTimeout);
  } catch (const std::exception& e) {
    try {
      // "" would read as success.
      store->set(done_key(info.rank), *e.what() ? e.what() : "failed");
    } catch (const std::exception&) {
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string flag = argc == 2 ? argv[1] : "";
  if (flag == "--build-id") {
    std::printf("%s\n", cohort::build_id());
    return 0;
  }
  if (flag != kProbeFlag) {
    std::fprintf(stderr,
                 "usage: cohort-probe --build-id\n"
                 "       (cohortrun --check starts it as cohort-probe %s on every slot of the job it checks)\n",
                 kProbeFlag);
    return 2;
  }
  try {
    return run_probe();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort-probe: %s\n", e.what());
    return 1;
  }
}
