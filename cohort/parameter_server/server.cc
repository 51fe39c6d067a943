#include "cohort/parameter_server/server.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/tunables.h"
#include "cohort/parameter_server/checkpoint.h"
#include "cohort/parameter_server/partition.h"
#include "cohort/parameter_server/replica.h"
#include "cohort/parameter_server/shard_spec.h"
#include "cohort/parameter_server/transport.h"

namespace cohort::ps {

using Clock = std::chrono::steady_clock;

std::string server_address_key(int server) { return "server/" + std::to_string(server); }
std::string server_dead_key(int server) { return "dead/" + std::to_string(server); }

ServerOptions server_options_from_env() {
  ServerOptions o;
  o.worker_timeout = Millis(static_cast<int64_t>(tunables::ps_worker_timeout_s() * 1000));
  o.first_contact_timeout = Millis(static_cast<int64_t>(tunables::timeout_s() * 1000));
  return o;
}

ServerOptions server_options_for(const rendezvous::LaunchInfo& info, const Role& role, const JobOptions& job) {
  COHORT_CHECK_AS(ConfigError, role.server) << "server_options_for: rank " << info.rank << " is a worker";
  ServerOptions o = server_options_from_env();
  o.server = role.index;
  o.num_servers = role.num_servers;
  o.num_workers = role.num_workers;
  o.job = job;
  o.secret = info.secret;
  o.job_id = info.job_id;
  const bool local = info.store_host.empty() || info.store_host == "127.0.0.1" || info.store_host == "localhost";
  o.tcp_host = local ? "127.0.0.1" : net::local_address_toward(info.store_host);
  COHORT_CHECK_AS(ConfigError, !o.tcp_host.empty())
      << "parameter server " << role.index << ": no route toward the store's host " << info.store_host;
  return o;
}

namespace {

enum class Presence { unknown, alive, departed, dead };

struct WorkerContact {
  Presence presence = Presence::unknown;
  uint32_t incarnation = 0;
  Clock::time_point last_heard;
};

struct Parked {
  std::string peer;
  Message request;
};

PartitionConfig partition_config(const ServerOptions& o, int partition, bool replicated) {
  return {.id = partition,
          .num_workers = o.num_workers,
          .staleness = o.job.staleness,
          .backup_workers = o.job.backup_workers,
          .optimizer = o.job.optimizer,
          .replicated = replicated,
          .replicate_every = o.job.replicate_every};
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<rendezvous::Store> store;
  ServerOptions options;
  ServerSocket socket;
  std::atomic<bool> stopping{false};
  int wake_fd = -1;
  Clock::time_point started = Clock::now();
  Clock::time_point last_fence_check = Clock::now();

  std::map<int, std::unique_ptr<Partition>> partitions;  // owned
  std::map<int, std::unique_ptr<Partition>> replicas;    // kept for another server
  std::map<int, int> replica_target;                     // partition -> server holding its replica (-1: none)
  std::vector<WorkerContact> workers;
  std::deque<Parked> parked;

  std::unique_ptr<Client> peers;  // to other servers (replication)
  std::map<int, bool> peer_connected;
  std::mutex acks_mutex;
  std::deque<std::pair<int, std::string>> acks;  // partition, error ("" ok)

  mutable std::mutex stats_mutex;
  std::string stats_text;
  PartitionCounters totals;

  Impl(std::shared_ptr<rendezvous::Store> s, ServerOptions o)
      : store(std::move(s)),
        options(std::move(o)),
        socket(ServerSocketOptions{.secret = options.secret, .tcp_host = options.tcp_host, .ipc = options.ipc,
                                   .job_id = options.job_id}),
        workers(static_cast<size_t>(options.num_workers)) {
    COHORT_CHECK_AS(ConfigError, options.server >= 0 && options.server < options.num_servers)
        << "server index " << options.server << " of " << options.num_servers;
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    COHORT_CHECK(wake_fd >= 0) << "eventfd: " << std::strerror(errno);
    // Partition p starts on server p.
    if (options.server < options.num_servers) {
      const int p = options.server;
      partitions[p] = std::make_unique<Partition>(partition_config(options, p, options.job.replicas > 0));
    }
    for (auto& w : workers) w.last_heard = started;
    store->set(server_address_key(options.server), socket.address().encode());
    COHORT_LOG(info) << "parameter server " << options.server << " listening on " << socket.address().tcp << " "
                     << socket.address().ipc;
  }

  ~Impl() {
    peers.reset();
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // ---------------------------------------------------------------- replies

  void reply(const std::string& peer, const Message& request, Partition* partition, Message&& out,
             Status status = Status::ok, std::optional<int64_t> step = std::nullopt) {
    out.header = request.header;
    out.header.status = static_cast<uint16_t>(status);
    if (step) out.header.step = *step;
    if (partition) {
      out.header.version = partition->version();
      // A worker that says hello (a replacement) goes on in the partition's timeline.
      if (request.kind() == Op::hello) out.header.timeline = partition->timeline();
      if (request.header.worker < workers.size()) out.header.settled = partition->settled(request.header.worker);
    }
    socket.reply(peer, out);
  }

  void reply_error(const std::string& peer, const Message& request, const std::string& text,
                   Status status = Status::error) {
    Message out;
    out.add(text);
    reply(peer, request, nullptr, std::move(out), status);
  }

  // ------------------------------------------------------------- workers

  void heard_from(const Header& h) {
    if (h.worker >= workers.size()) return;
    WorkerContact& w = workers[h.worker];
    if (w.incarnation != 0 && w.incarnation != h.incarnation && h.kind() != Op::hello) return;
    w.last_heard = Clock::now();
    if (w.presence == Presence::unknown) w.presence = Presence::alive;
  }

  void worker_gone(uint32_t worker, Presence how, const std::string& why) {
    WorkerContact& w = workers[worker];
    if (w.presence == Presence::dead || w.presence == Presence::departed) return;
    w.presence = how;
    for (auto& [p, partition] : partitions) {
      if (how == Presence::dead)
        partition->declare_dead(worker);
      else
        partition->depart(worker, w.incarnation);
    }
    if (how == Presence::dead) {
      int live = 0;
      for (const auto& c : workers) live += c.presence == Presence::alive || c.presence == Presence::unknown;
      COHORT_LOG(warn) << "parameter server " << options.server << ": worker " << worker << " " << why
                       << ": declared dead; its uncommitted step is discarded and training goes on with " << live
                       << " worker(s)";
    }
  }

  void check_workers() {
    const auto now = Clock::now();
    for (uint32_t i = 0; i < workers.size(); ++i) {
      const WorkerContact& w = workers[i];
      if (w.presence == Presence::alive && now - w.last_heard > options.worker_timeout)
        worker_gone(i, Presence::dead,
                    "was silent for " + std::to_string(options.worker_timeout.count()) + " ms");
      else if (w.presence == Presence::unknown && now - started > options.first_contact_timeout)
        worker_gone(i, Presence::dead,
                    "never connected within " + std::to_string(options.first_contact_timeout.count()) + " ms");
    }
  }

  bool everyone_gone() const {
    bool any_contact = false;
    for (const auto& w : workers) {
      if (w.presence == Presence::alive || w.presence == Presence::unknown) return false;
      any_contact = true;
    }
    return any_contact;
  }

  // ------------------------------------------------------------- requests

  Partition* partition_of(const Message& m) {
    const auto it = partitions.find(static_cast<int>(m.header.partition));
    return it == partitions.end() ? nullptr : it->second.get();
  }

  // The partition `m` names when this server owns it; else null, after
  // answering that it is not here (the worker then looks for its owner).
  Partition* owned_or_refused(const std::string& peer, const Message& m) {
    Partition* p = partition_of(m);
    if (!p)
      reply_error(peer, m, "partition " + std::to_string(m.header.partition) + " is not on server " +
                               std::to_string(options.server), Status::unknown_partition);
    return p;
  }

  // Whether a parked or new read may be served now; serves it when so.
  bool try_read(const std::string& peer, Message& m) {
    Partition* p = owned_or_refused(peer, m);
    if (!p) return true;
    const int64_t clock = m.kind() == Op::push_pull ? m.header.step + 1 : m.header.step;
    if (!p->may_read(clock)) return false;
    p->note_read(clock);
    const uint64_t key = shard_key(m.header.variable, m.header.shard);
    Shard& s = p->shard(key);
    Message out;
    if (m.kind() == Op::pull_rows) {
      std::vector<int64_t> scratch;
      const std::span<const int64_t> rows = m.row_ids(0, scratch);
      zmq::message_t values(rows.size() * static_cast<size_t>(s.row_bytes()));
      p->read_rows(key, rows, static_cast<std::byte*>(values.data()));
      out.frames.push_back(std::move(values));
    } else {
      zmq::message_t values(s.values.size());
      p->read_dense(key, static_cast<std::byte*>(values.data()));
      out.frames.push_back(std::move(values));
    }
    reply(peer, m, p, std::move(out));
    return true;
  }

  bool try_save(const std::string& peer, Message& m) {
    Partition* p = owned_or_refused(peer, m);
    if (!p) return true;
    if (p->applied_version() < m.header.step) return false;
    const auto entries = save_partition(*p, std::string(m.text(0)), std::string(m.text(1)));
    std::vector<std::string> lines;
    for (const auto& e : entries) lines.push_back(e.encode());
    Message out;
    out.add(join_fields(lines));
    reply(peer, m, p, std::move(out));
    return true;
  }

  // A commit is answered once its partition (and the replica) keep it, a
  // restore once the replica took the restored state: a worker that goes on
  // after the reply finds them in place even if this server dies next.
  bool try_answer_commit(const std::string& peer, Message& m) {
    Partition* p = owned_or_refused(peer, m);
    if (!p) return true;
    const bool done = m.kind() == Op::keep_commit ? p->commit_kept(m.header.step)
                                                  : p->restore_replicated(m.header.step);
    if (done) reply(peer, m, p, Message());
    return done;
  }

  bool try_serve(const std::string& peer, Message& m) {
    switch (m.kind()) {
      case Op::save:
        return try_save(peer, m);
      case Op::keep_commit:
      case Op::restore_commit:
        return try_answer_commit(peer, m);
      default:
        return try_read(peer, m);
    }
  }

  // The workers an elastic restore names go on, the others are dead: the
  // server stops waiting for them at once (not after the worker timeout).
  void restore_commit(Partition& p, const Message& m) {
    std::vector<uint32_t> live;
    for (const std::string& field : split_fields(m.text(0), ',')) {
      if (field.empty()) continue;
      const unsigned long w = std::stoul(field);
      COHORT_CHECK(w < workers.size()) << "restore_commit names worker " << w << " of " << workers.size();
      live.push_back(static_cast<uint32_t>(w));
    }
    p.restore_commit(m.header.step, live, m.header.timeline);
    for (uint32_t w = 0; w < workers.size(); ++w) {
      const bool goes_on = std::find(live.begin(), live.end(), w) != live.end();
      if (goes_on) {
        workers[w].presence = Presence::alive;
        workers[w].last_heard = Clock::now();
      } else if (workers[w].presence == Presence::alive || workers[w].presence == Presence::unknown) {
        workers[w].presence = Presence::dead;
      }
    }
    COHORT_LOG(info) << "parameter server " << options.server << ": partition " << p.id()
                     << " restored its commit at version " << m.header.step << " for worker(s) " << m.text(0);
  }

  void serve_parked() {
    for (size_t n = parked.size(); n > 0; --n) {
      Parked item = std::move(parked.front());
      parked.pop_front();
      bool done = false;
      try {
        done = try_serve(item.peer, item.request);
      } catch (const std::exception& e) {
        reply_error(item.peer, item.request, e.what());
        done = true;
      }
      if (!done) parked.push_back(std::move(item));
    }
  }

  void handle(const std::string& peer, Message& m) {
    const Header& h = m.header;
    heard_from(h);
    switch (h.kind()) {
      case Op::ping:
        reply(peer, m, nullptr, Message());
        return;
      case Op::bye:
        if (h.worker < workers.size() && workers[h.worker].incarnation == h.incarnation)
          worker_gone(h.worker, Presence::departed, "left");
        reply(peer, m, nullptr, Message());
        return;
      case Op::shutdown:
        reply(peer, m, nullptr, Message());
        stopping = true;
        return;
      case Op::stats: {
        Message out;
        out.add(collect_stats());
        reply(peer, m, nullptr, std::move(out));
        return;
      }
      case Op::replicate:
        handle_replicate(peer, m);
        return;
      case Op::promote:
        handle_promote(peer, m);
        return;
      default:
        break;
    }
    Partition* p = owned_or_refused(peer, m);
    if (!p) return;
    const uint32_t w = h.worker;
    const bool from_worker = w < workers.size();
    if (h.kind() == Op::hello) {
      COHORT_CHECK(from_worker) << "hello from a client that is not a worker";
      WorkerContact& c = workers[w];
      if (c.incarnation != 0 && c.incarnation != h.incarnation)
        COHORT_LOG(warn) << "parameter server " << options.server << ": worker " << w
                         << " is back as a new incarnation; the old one's uncommitted step is discarded";
      c.incarnation = h.incarnation;
      c.presence = Presence::alive;
      c.last_heard = Clock::now();
      for (auto& [id, other] : partitions)
        if (other.get() != p) other->hello(w, h.incarnation);
      const auto hello = p->hello(w, h.incarnation);
      reply(peer, m, p, Message(), Status::ok, hello.clock);
      return;
    }
    // A declaration is idempotent and names no step: a replacement makes
    // its declarations before its hello.
    if (from_worker && h.kind() != Op::declare && !p->accepts(w, h.incarnation)) {
      reply_error(peer, m, "worker " + std::to_string(w) + " (incarnation " + std::to_string(h.incarnation) +
                               ") was declared dead or replaced; restart it to rejoin");
      return;
    }
    // A step of a timeline an elastic restore rolled back (a retained
    // request replayed to a partition's new owner): never applied.
    const Op kind = h.kind();
    const bool steps = kind == Op::push || kind == Op::push_rows || kind == Op::push_pull || kind == Op::commit ||
                       kind == Op::join || kind == Op::keep_commit;
    if (from_worker && steps && !p->current_timeline(h.timeline)) {
      reply_error(peer, m, std::string(op_name(kind)) + " of step " + std::to_string(h.step) + " from timeline " +
                               std::to_string(h.timeline) + ", which a restore to timeline " +
                               std::to_string(p->timeline()) + " rolled back", Status::stale);
      return;
    }
    switch (h.kind()) {
      case Op::join:
        p->join(w, h.incarnation, h.step);
        reply(peer, m, p, Message());
        break;
      case Op::declare: {
        const ShardSpec spec = ShardSpec::decode(m.text(0));
        const auto& data = m.frames.at(1);
        p->declare(spec.info, spec.variable,
                   {static_cast<const std::byte*>(data.data()), data.size()});
        reply(peer, m, p, Message());
        break;
      }
      case Op::push:
      case Op::push_pull: {
        const auto& g = m.frames.at(0);
        p->stage_dense(w, h.step, shard_key(h.variable, h.shard), {static_cast<const std::byte*>(g.data()), g.size()});
        if (h.kind() == Op::push) {
          reply(peer, m, p, Message());
        } else if (!try_read(peer, m)) {
          m.frames.clear();
          parked.push_back({peer, std::move(m)});
        }
        break;
      }
      case Op::push_rows: {
        std::vector<int64_t> scratch;
        const auto& g = m.frames.at(1);
        p->stage_rows(w, h.step, shard_key(h.variable, h.shard), m.row_ids(0, scratch),
                      {static_cast<const std::byte*>(g.data()), g.size()});
        reply(peer, m, p, Message());
        break;
      }
      case Op::commit:
        p->commit(w, h.step);
        reply(peer, m, p, Message());
        break;
      case Op::pull:
      case Op::pull_rows:
        if (!try_read(peer, m)) parked.push_back({peer, std::move(m)});
        break;
      case Op::save:
        if (!try_save(peer, m)) parked.push_back({peer, std::move(m)});
        break;
      case Op::keep_commit:
        p->keep_commit(h.step);
        if (!try_answer_commit(peer, m)) parked.push_back({peer, std::move(m)});
        break;
      case Op::restore_commit:
        restore_commit(*p, m);
        if (!try_answer_commit(peer, m)) parked.push_back({peer, std::move(m)});
        break;
      case Op::load: {
        const std::string dir(m.text(0));
        load_partition(*p, dir, read_manifest(dir));
        p->request_snapshot();
        COHORT_LOG(info) << "parameter server " << options.server << ": partition " << p->id() << " loaded from "
                         << dir << " at step " << p->version();
        reply(peer, m, p, Message());
        break;
      }
      default:
        reply_error(peer, m, std::string("unexpected request ") + op_name(h.kind()));
    }
  }

  // ----------------------------------------------------------- replication

  void handle_replicate(const std::string& peer, Message& m) {
    const int p = static_cast<int>(m.header.partition);
    auto& replica = replicas[p];
    if (!replica) replica = std::make_unique<Partition>(partition_config(options, p, false));
    const int64_t version = apply_snapshot(*replica, m);
    COHORT_LOG(debug) << "parameter server " << options.server << ": replica of partition " << p << " at version "
                      << version;
    reply(peer, m, nullptr, Message());
  }

  // The first server after `partition` in ring order that is neither this
  // one nor known to be lost; -1 when none.
  int choose_replica_target(int partition) {
    for (int i = 1; i <= options.num_servers; ++i) {
      const int s = (partition + i) % options.num_servers;
      if (s == options.server) continue;
      const std::vector<std::string> key = {server_dead_key(s)};
      if (store->check(key)) continue;
      if (peers && peers->lost(s)) continue;
      return s;
    }
    return -1;
  }

  void ensure_peer(int s) {
    if (!peers) {
      ClientOptions o = client_options_from_env();
      o.secret = options.secret;
      o.name = "server" + std::to_string(options.server);
      peers = std::make_unique<Client>(o);
    }
    if (!peer_connected[s]) {
      peers->add_server(s, ServerAddress::decode(store->get(server_address_key(s))));
      peer_connected[s] = true;
    }
  }

  void send_snapshots() {
    for (auto& [id, p] : partitions) {
      if (!p->snapshot_due()) continue;
      auto it = replica_target.find(id);
      if (it == replica_target.end()) it = replica_target.emplace(id, choose_replica_target(id)).first;
      if (it->second < 0) {
        COHORT_LOG(warn) << "parameter server " << options.server << ": partition " << id
                         << " has no live server left for its replica; it is kept without one";
        p->set_replicated(false);
        continue;
      }
      ensure_peer(it->second);
      Message snapshot = make_snapshot(*p);
      const int partition = id;
      snapshot_handles[id] = peers->request(
          Target::to_server(it->second), std::move(snapshot),
          [this, partition](Message&) {
            {
              std::lock_guard lock(acks_mutex);
              acks.emplace_back(partition, "");
            }
            wake();
          },
          "replica snapshot of partition " + std::to_string(id));
      // A failure (an error reply) arrives through the handle: drain_acks().
      pending_snapshot[id] = Clock::now();
    }
  }
  std::map<int, Clock::time_point> pending_snapshot;
  std::map<int, Handle> snapshot_handles;

  void drain_acks() {
    std::deque<std::pair<int, std::string>> batch;
    {
      std::lock_guard lock(acks_mutex);
      batch.swap(acks);
    }
    for (auto& [id, error] : batch) {
      pending_snapshot.erase(id);
      snapshot_handles.erase(id);
      const auto it = partitions.find(id);
      if (it != partitions.end()) it->second->replicated();
    }
    // A replica server that was lost never answers, and one that refused a
    // snapshot never acknowledges it: choose a replica again and send a
    // whole snapshot there (visibility, and the commits' answers, wait for
    // it meanwhile).
    for (auto it = pending_snapshot.begin(); it != pending_snapshot.end();) {
      const int target = replica_target.count(it->first) ? replica_target[it->first] : -1;
      const std::vector<std::string> dead = {server_dead_key(target)};
      std::string refused;
      if (const auto h = snapshot_handles.find(it->first); h != snapshot_handles.end() && h->second.poll()) {
        try {
          h->second.wait_for(std::chrono::nanoseconds(0));
        } catch (const std::exception& e) {
          refused = e.what();
        }
      }
      const bool lost = target >= 0 && ((peers && peers->lost(target)) || store->check(dead));
      if (lost || !refused.empty()) {
        if (lost)
          COHORT_LOG(warn) << "parameter server " << options.server << ": the replica server " << target
                           << " of partition " << it->first << " is lost; replicating elsewhere";
        else
          COHORT_LOG(error) << "parameter server " << options.server << ": the replica server " << target
                            << " of partition " << it->first << " refused its snapshot (" << refused
                            << "); sending it whole again";
        snapshot_handles.erase(it->first);
        replica_target.erase(it->first);
        if (auto p = partitions.find(it->first); p != partitions.end()) p->second->replica_lost();
        it = pending_snapshot.erase(it);
      } else {
        ++it;
      }
    }
  }

  void handle_promote(const std::string& peer, Message& m) {
    const int id = static_cast<int>(m.header.partition);
    const int dead_server = static_cast<int>(m.header.aux);
    const int64_t seen = m.header.version;
    if (auto it = partitions.find(id); it != partitions.end()) {
      reply(peer, m, it->second.get(), Message());
      return;
    }
    std::unique_ptr<Partition> p;
    std::string source;
    if (auto it = replicas.find(id); it != replicas.end()) {
      p = std::move(it->second);
      replicas.erase(it);
      source = "its replica on this server";
    } else if (!options.job.checkpoint_dir.empty() && has_manifest(options.job.checkpoint_dir)) {
      p = std::make_unique<Partition>(partition_config(options, id, false));
      for (const std::string& line : split_fields(m.text(0))) {
        const ShardSpec spec = ShardSpec::decode(line);
        p->declare(spec.info, spec.variable, Bytes(static_cast<size_t>(spec.info.rows() * spec.variable.row_bytes())));
      }
      load_partition(*p, options.job.checkpoint_dir, read_manifest(options.job.checkpoint_dir));
      source = "the checkpoint " + options.job.checkpoint_dir;
    } else {
      reply_error(peer, m, "partition " + std::to_string(id) + " (server " + std::to_string(dead_server) +
                               ") is lost and cannot be restored: no replica (replicas=1) and no checkpoint "
                               "(checkpoint_dir=) to restore it from");
      return;
    }
    const int64_t restored = p->applied_version();
    COHORT_LOG(warn) << "parameter server " << options.server << ": took over partition " << id << " of lost server "
                     << dead_server << " from " << source << " at version " << restored
                     << "; the workers had seen version " << seen << ": "
                     << std::max<int64_t>(0, seen - restored) << " update(s) since then are lost";
    // The new owner replicates again when another server is left.
    p->set_replicated(options.job.replicas > 0 && choose_replica_target(id) >= 0);
    p->request_snapshot();
    for (uint32_t w = 0; w < workers.size(); ++w) {
      if (workers[w].presence == Presence::dead) p->declare_dead(w);
      if (workers[w].presence == Presence::departed) p->depart(w, workers[w].incarnation);
    }
    Partition* raw = p.get();
    partitions[id] = std::move(p);
    reply(peer, m, raw, Message());
  }

  // ------------------------------------------------------------------ loop

  std::string collect_stats() const {
    std::ostringstream s;
    s << "server=" << options.server << "\nrefused=" << socket.refused() << "\n";
    for (const auto& [kind, map] : {std::pair{"partition", &partitions}, std::pair{"replica", &replicas}}) {
      for (const auto& [id, p] : *map) {
        const auto& c = p->counters();
        const std::string prefix = std::string(kind) + "." + std::to_string(id) + ".";
        s << prefix << "version=" << p->version() << "\n"
          << prefix << "steps_applied=" << c.steps_applied << "\n"
          << prefix << "late_dropped=" << c.late_dropped << "\n"
          << prefix << "stale_ignored=" << c.stale_ignored << "\n"
          << prefix << "discarded_steps=" << c.discarded_steps << "\n"
          << prefix << "max_staleness=" << c.max_staleness << "\n"
          << prefix << "reads=" << c.reads << "\n"
          << prefix << "restores=" << c.restores << "\n";
        for (const auto& [key, shard] : p->shards())
          s << prefix << "shard." << shard.spec.name << "." << shard.info.index << ".updates=" << shard.updates
            << "\n";
      }
    }
    return s.str();
  }

  void check_fence() {
    const auto now = Clock::now();
    if (now - last_fence_check < std::chrono::seconds(1)) return;
    last_fence_check = now;
    const std::vector<std::string> key = {server_dead_key(options.server)};
    if (store->check(key))
      throw PeerLostError("parameter server " + std::to_string(options.server) +
                              " was declared lost by a worker (" + store->get(key[0]) +
                              "); it stops serving so that its partitions have one owner",
                          options.server);
  }

  void run() {
    Message m;
    std::string peer;
    while (!stopping.load()) {
      if (socket.wait(Millis(100), wake_fd)) {
        uint64_t n;
        [[maybe_unused]] auto r = ::read(wake_fd, &n, sizeof n);
      }
      for (int budget = 0; budget < 1024 && socket.receive(m, peer); ++budget) {
        if (m.header.magic != kWireMagic) continue;
        try {
          handle(peer, m);
        } catch (const std::exception& e) {
          reply_error(peer, m, e.what());
        }
        m = Message();
      }
      drain_acks();
      send_snapshots();
      serve_parked();
      check_workers();
      serve_parked();
      check_fence();
      {
        std::lock_guard lock(stats_mutex);
        stats_text = collect_stats();
      }
      if (everyone_gone()) break;
    }
    // What the partitions this server owns did, once, for the caller of run().
    {
      std::lock_guard lock(stats_mutex);
      for (const auto& [id, p] : partitions) merge(totals, p->counters());
    }
    // Parked requests stay unanswered: a worker still waiting here is alive,
    // so this server is stopping while it is needed (fenced, or stopped from
    // outside), and silence makes the worker fail its partition over.
    parked.clear();
  }
};

Server::Server(std::shared_ptr<rendezvous::Store> store, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(store), std::move(options))) {}

Server::~Server() = default;

const ServerAddress& Server::address() const { return impl_->socket.address(); }

void Server::run() { impl_->run(); }

void Server::stop() {
  impl_->stopping = true;
  impl_->wake();
}

std::string Server::stats() const {
  std::lock_guard lock(impl_->stats_mutex);
  return impl_->stats_text;
}

PartitionCounters Server::totals() const {
  std::lock_guard lock(impl_->stats_mutex);
  return impl_->totals;
}

int Server::refused() const { return impl_->socket.refused(); }

}  // namespace cohort::ps
