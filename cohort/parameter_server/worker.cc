#include "cohort/parameter_server/worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/parameter_server/checkpoint.h"
#include "cohort/parameter_server/server.h"
#include "cohort/parameter_server/shard_spec.h"
#include "cohort/parameter_server/transport.h"
#include "cohort/rendezvous/auth.h"

namespace cohort::ps {

namespace {

uint32_t new_incarnation() {
  uint32_t v = 0;
  while (v == 0) {
    const std::string bytes = rendezvous::random_bytes(sizeof v);
    std::memcpy(&v, bytes.data(), sizeof v);
  }
  return v;
}

std::span<const std::byte> bytes_of(const void* base, size_t offset, size_t n) {
  return {static_cast<const std::byte*>(base) + offset, n};
}

Message shard_request(Op op, const ShardInfo& shard, DType dtype, int64_t step) {
  Message m(op);
  m.header.variable = shard.variable;
  m.header.shard = shard.index;
  m.header.dtype = static_cast<uint32_t>(dtype);
  m.header.step = step;
  return m;
}

}  // namespace

Worker::Worker(std::shared_ptr<rendezvous::Store> store, WorkerOptions options)
    : store_(std::move(store)), options_(std::move(options)) {
  COHORT_CHECK_AS(ConfigError, options_.worker >= 0 && options_.worker < options_.num_workers)
      << "worker index " << options_.worker << " of " << options_.num_workers;
  COHORT_CHECK_AS(ConfigError, options_.num_servers >= 1) << "a parameter-server job needs a server";
  ClientOptions c = options_.client;
  c.secret = options_.secret;
  c.worker = static_cast<uint32_t>(options_.worker);
  c.incarnation = new_incarnation();
  c.name = "worker" + std::to_string(options_.worker);
  client_ = std::make_unique<Client>(c);
  client_->set_lost_handler([this](int server, const std::string& why) { on_server_lost(server, why); });
  for (int s = 0; s < options_.num_servers; ++s) {
    client_->add_server(s, ServerAddress::decode(store_->get(server_address_key(s))));
    client_->route(s, s);
  }
  seen_version_.assign(static_cast<size_t>(options_.num_servers), 0);
}

Worker::~Worker() {
  try {
    finish();
  } catch (const std::exception& e) {
    COHORT_LOG(debug) << "worker " << options_.worker << ": leaving: " << e.what();
  }
  // The client's failover thread calls back into this worker (its layout,
  // its client): it stops while they live.
  client_->stop_failover();
}

void Worker::track(int partition, int64_t version) {
  std::lock_guard lock(seen_mutex_);
  auto& seen = seen_version_.at(static_cast<size_t>(partition));
  seen = std::max(seen, version);
}

TransportCounters Worker::counters() const { return client_->counters(); }

void Worker::declare(std::vector<VariableSpec> variables, std::span<const void* const> initial) {
  COHORT_CHECK_EQ(variables.size(), initial.size()) << "one initial value per variable";
  layout_ = Layout::build(std::move(variables), options_.num_servers, options_.job.partition);
  // A server another worker found lost (its mark in the store) is lost for
  // this one from the start: its partition is asked of the server that took
  // it over at once, not after this client's server timeout (a replacement
  // worker joining after a server's loss). Once the layout is built: the
  // failover reads it.
  for (int s = 0; s < options_.num_servers; ++s) {
    const std::vector<std::string> dead = {server_dead_key(s)};
    if (store_->check(dead)) client_->declare_lost(s, "marked lost in the store by " + store_->get(dead[0]));
  }
  std::vector<Handle> handles;
  for (uint32_t v = 0; v < layout_.variables().size(); ++v) {
    const VariableSpec& spec = layout_.variable(v);
    for (const ShardInfo& s : layout_.shards(v)) {
      Message m = shard_request(Op::declare, s, spec.dtype, 0);
      m.add(ShardSpec{s, spec}.encode());
      if (initial[v]) {
        const auto data = bytes_of(initial[v], static_cast<size_t>(s.row_begin * spec.row_bytes()),
                                   static_cast<size_t>(s.rows() * spec.row_bytes()));
        m.add(data.data(), data.size());
      } else {
        COHORT_CHECK_AS(ConfigError, spec.init.kind != Initializer::Kind::given)
            << "variable '" << spec.name << "' has neither initial values nor an initializer";
        m.add(std::string_view());  // the server generates the values
      }
      handles.push_back(client_->request(Target::to_partition(s.partition), std::move(m), nullptr,
                                         "declare of '" + spec.name + "' shard " + std::to_string(s.index)));
    }
  }
  wait_all(handles);
}

void Worker::load(const std::string& dir) { to_every_partition(Op::load, 0, dir, "load from " + dir); }

void Worker::to_every_partition(Op op, int64_t step, const std::string& text, const std::string& what) {
  std::vector<Handle> handles;
  for (int p = 0; p < options_.num_servers; ++p) {
    Message m(op);
    m.header.step = step;
    if (!text.empty()) m.add(text);
    handles.push_back(
        client_->request(Target::to_partition(p), std::move(m), nullptr, what + " on partition " + std::to_string(p)));
  }
  wait(handles);
}

int64_t Worker::start() {
  if (options_.worker == 0)
    store_->set("ready", "1");
  else
    store_->get("ready");
  std::vector<int64_t> versions(options_.num_servers), clocks(options_.num_servers);
  std::vector<uint64_t> timelines(options_.num_servers);
  std::vector<Handle> handles;
  for (int p = 0; p < options_.num_servers; ++p) {
    handles.push_back(client_->request(
        Target::to_partition(p), Message(Op::hello),
        [&, p](Message& reply) {
          versions[p] = reply.header.version;
          clocks[p] = reply.header.step;
          timelines[p] = reply.header.timeline;
          track(p, reply.header.version);
        },
        "hello to partition " + std::to_string(p)));
  }
  wait_all(handles);
  // A worker joining an elastic job goes on in the timeline of the
  // partitions' last restore (its own steps are refused otherwise).
  client_->set_timeline(*std::max_element(timelines.begin(), timelines.end()));
  // Synchronous: a replacement joins at the step in progress; otherwise a
  // worker index resumes its own clock.
  int64_t clock = 0;
  for (int p = 0; p < options_.num_servers; ++p)
    clock = std::max(clock, options_.job.staleness == 0 ? versions[p] : clocks[p]);
  clock_ = clock;
  handles.clear();
  for (int p = 0; p < options_.num_servers; ++p) {
    Message m(Op::join);
    m.header.step = clock;
    handles.push_back(client_->request(Target::to_partition(p), std::move(m), nullptr,
                                       "join of partition " + std::to_string(p)));
  }
  wait_all(handles);
  if (clock > 0)
    COHORT_LOG(info) << "worker " << options_.worker << " joined the parameter servers at step " << clock;
  return clock;
}

Handle Worker::pull(uint32_t v, void* out) {
  const VariableSpec& spec = layout_.variable(v);
  const auto& shards = layout_.shards(v);
  auto group = HandleState::group("pull of '" + spec.name + "'", static_cast<int>(shards.size()));
  const int64_t step = clock_.load();
  for (const ShardInfo& s : shards) {
    std::byte* dst = static_cast<std::byte*>(out) + s.row_begin * spec.row_bytes();
    const size_t n = static_cast<size_t>(s.rows() * spec.row_bytes());
    client_->request_part(
        group, Target::to_partition(s.partition), shard_request(Op::pull, s, spec.dtype, step),
        [this, dst, n, p = s.partition](Message& reply) {
          COHORT_CHECK(!reply.frames.empty() && reply.frames[0].size() == n) << "pull reply of the wrong size";
          std::memcpy(dst, reply.frames[0].data(), n);
          track(p, reply.header.version);
        },
        "pull of '" + spec.name + "' shard " + std::to_string(s.index));
  }
  return Handle(group);
}

Handle Worker::push(uint32_t v, const void* grad) {
  const VariableSpec& spec = layout_.variable(v);
  const auto& shards = layout_.shards(v);
  auto group = HandleState::group("push of '" + spec.name + "'", static_cast<int>(shards.size()));
  const int64_t step = clock_.load();
  for (const ShardInfo& s : shards) {
    Message m = shard_request(Op::push, s, spec.dtype, step);
    const auto data = bytes_of(grad, static_cast<size_t>(s.row_begin * spec.row_bytes()),
                               static_cast<size_t>(s.rows() * spec.row_bytes()));
    m.add(data.data(), data.size());
    client_->request_part(group, Target::to_partition(s.partition), std::move(m),
                          [this, p = s.partition](Message& reply) { track(p, reply.header.version); },
                          "push of '" + spec.name + "' shard " + std::to_string(s.index), {.retain = true});
  }
  return Handle(group);
}

Handle Worker::push_pull(uint32_t v, const void* grad, void* out) {
  const VariableSpec& spec = layout_.variable(v);
  const auto& shards = layout_.shards(v);
  auto group = HandleState::group("push_pull of '" + spec.name + "'", static_cast<int>(shards.size()));
  const int64_t step = clock_.load();
  for (const ShardInfo& s : shards) {
    Message m = shard_request(Op::push_pull, s, spec.dtype, step);
    const size_t offset = static_cast<size_t>(s.row_begin * spec.row_bytes());
    const size_t n = static_cast<size_t>(s.rows() * spec.row_bytes());
    const auto data = bytes_of(grad, offset, n);
    m.add(data.data(), data.size());
    std::byte* dst = static_cast<std::byte*>(out) + offset;
    client_->request_part(
        group, Target::to_partition(s.partition), std::move(m),
        [this, dst, n, p = s.partition](Message& reply) {
          COHORT_CHECK(!reply.frames.empty() && reply.frames[0].size() == n) << "push_pull reply of the wrong size";
          std::memcpy(dst, reply.frames[0].data(), n);
          track(p, reply.header.version);
        },
        "push_pull of '" + spec.name + "' shard " + std::to_string(s.index), {.retain = true});
  }
  return Handle(group);
}

std::vector<std::pair<const ShardInfo*, std::span<const int64_t>>> Worker::split(
    uint32_t v, std::span<const int64_t> rows) const {
  const VariableSpec& spec = layout_.variable(v);
  for (size_t i = 0; i < rows.size(); ++i) {
    COHORT_CHECK(rows[i] >= 0 && rows[i] < spec.rows)
        << "row " << rows[i] << " is outside '" << spec.name << "' (" << spec.rows << " rows)";
    COHORT_CHECK(i == 0 || rows[i - 1] < rows[i])
        << "rows of '" << spec.name << "' must be distinct and ascending (ps::deduplicate)";
  }
  std::vector<std::pair<const ShardInfo*, std::span<const int64_t>>> parts;
  size_t at = 0;
  for (const ShardInfo& s : layout_.shards(v)) {
    size_t end = at;
    while (end < rows.size() && rows[end] < s.row_end) ++end;
    if (end > at) parts.emplace_back(&s, rows.subspan(at, end - at));
    at = end;
  }
  return parts;
}

Handle Worker::pull_rows(uint32_t v, std::span<const int64_t> rows, void* out) {
  const VariableSpec& spec = layout_.variable(v);
  const auto parts = split(v, rows);
  auto group = HandleState::group("pull_rows of '" + spec.name + "'", static_cast<int>(parts.size()));
  const int64_t step = clock_.load();
  for (const auto& [s, part] : parts) {
    Message m = shard_request(Op::pull_rows, *s, spec.dtype, step);
    std::vector<int64_t> local(part.begin(), part.end());
    for (int64_t& r : local) r -= s->row_begin;
    m.add(std::span<const int64_t>(local));
    std::byte* dst = static_cast<std::byte*>(out) + (part.data() - rows.data()) * spec.row_bytes();
    const size_t n = part.size() * static_cast<size_t>(spec.row_bytes());
    client_->request_part(
        group, Target::to_partition(s->partition), std::move(m),
        [this, dst, n, p = s->partition](Message& reply) {
          COHORT_CHECK(!reply.frames.empty() && reply.frames[0].size() == n) << "pull_rows reply of the wrong size";
          std::memcpy(dst, reply.frames[0].data(), n);
          track(p, reply.header.version);
        },
        "pull_rows of '" + spec.name + "' shard " + std::to_string(s->index));
  }
  return Handle(group);
}

Handle Worker::push_rows(uint32_t v, std::span<const int64_t> rows, const void* grad) {
  const VariableSpec& spec = layout_.variable(v);
  const auto parts = split(v, rows);
  auto group = HandleState::group("push_rows of '" + spec.name + "'", static_cast<int>(parts.size()));
  const int64_t step = clock_.load();
  for (const auto& [s, part] : parts) {
    Message m = shard_request(Op::push_rows, *s, spec.dtype, step);
    std::vector<int64_t> local(part.begin(), part.end());
    for (int64_t& r : local) r -= s->row_begin;
    m.add(std::span<const int64_t>(local));
    const auto data = bytes_of(grad, static_cast<size_t>((part.data() - rows.data()) * spec.row_bytes()),
                               part.size() * static_cast<size_t>(spec.row_bytes()));
    m.add(data.data(), data.size());
    client_->request_part(group, Target::to_partition(s->partition), std::move(m),
                          [this, p = s->partition](Message& reply) { track(p, reply.header.version); },
                          "push_rows of '" + spec.name + "' shard " + std::to_string(s->index), {.retain = true});
  }
  return Handle(group);
}

Handle Worker::end_step() {
  const int64_t step = clock_.fetch_add(1);
  auto group = HandleState::group("commit of step " + std::to_string(step), options_.num_servers);
  for (int p = 0; p < options_.num_servers; ++p) {
    Message m(Op::commit);
    m.header.step = step;
    client_->request_part(group, Target::to_partition(p), std::move(m),
                          [this, p](Message& reply) { track(p, reply.header.version); },
                          "commit of step " + std::to_string(step) + " on partition " + std::to_string(p),
                          {.retain = true});
  }
  return Handle(group);
}

void Worker::save(const std::string& dir) {
  const int64_t step = clock_.load();
  std::vector<std::string> replies(options_.num_servers);
  std::vector<Handle> handles;
  for (int p = 0; p < options_.num_servers; ++p) {
    Message m(Op::save);
    // Synchronous partitions write once the step before `step` is applied;
    // others write what they have.
    m.header.step = options_.job.staleness == 0 ? step : 0;
    m.add(dir);
    m.add("part-" + std::to_string(p) + "-" + std::to_string(step) + ".bin");
    handles.push_back(client_->request(
        Target::to_partition(p), std::move(m), [&replies, p](Message& reply) { replies[p] = reply.text(0); },
        "save of partition " + std::to_string(p) + " to " + dir));
  }
  wait_all(handles);
  Manifest manifest{.step = step, .rule = update_rule_name(options_.job.optimizer.rule), .entries = {}};
  for (const std::string& text : replies)
    for (const std::string& line : split_fields(text)) manifest.entries.push_back(CheckpointEntry::decode(line));
  write_manifest(dir, manifest);
}

void Worker::keep_commit() {
  const int64_t version = clock_.load();
  to_every_partition(Op::keep_commit, version, "", "commit of step " + std::to_string(version));
}

void Worker::fail_pending(const std::string& why) {
  // The client runs its commands in order: what is requested after this is
  // not failed with the rest.
  for (int p = 0; p < options_.num_servers; ++p) client_->fail_partition(p, why);
}

void Worker::rewind(int64_t clock, uint64_t timeline) {
  std::lock_guard lock(timeline_mutex_);
  fail_pending("worker " + std::to_string(options_.worker) + " went back to its commit at step " +
               std::to_string(clock));
  client_->set_timeline(timeline);
  clock_ = clock;
}

uint64_t Worker::timeline() const { return client_->timeline(); }

void Worker::restore_commit(int64_t clock, std::span<const int> live, uint64_t timeline) {
  std::string names;
  for (int w : live) {
    COHORT_CHECK_AS(ConfigError, w >= 0 && w < options_.num_workers)
        << "restore_commit: worker " << w << " of " << options_.num_workers;
    names += (names.empty() ? "" : ",") + std::to_string(w);
  }
  // A partition with no live worker would be declared empty: one at least.
  COHORT_CHECK_AS(ConfigError, !names.empty()) << "restore_commit: no worker goes on";
  rewind(clock, timeline);
  to_every_partition(Op::restore_commit, clock, names, "restore of the commit at step " + std::to_string(clock));
}

void Worker::wait(const std::vector<Handle>& handles) {
  if (!options_.abandoned) return wait_all(handles);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(tunables::timeout_s());
  for (const Handle& h : handles) {
    for (;;) {
      try {
        if (h.wait_for(std::chrono::milliseconds(20))) break;
      } catch (const std::exception&) {
        break;  // rethrown by wait_all below, once every call is done
      }
      const std::optional<std::string> why = options_.abandoned();
      if (!why && Clock::now() < deadline) continue;
      // Nothing may land in the callers' buffers after the throw: the client
      // fails what is pending at once, in order.
      fail_pending(why ? "the world was abandoned" : "timed out");
      for (const Handle& other : handles)
        while (!other.poll()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (why) throw PeerLostError("worker " + std::to_string(options_.worker) + ": " + h.what() +
                                       " was abandoned: " + *why, -1);
      COHORT_THROW(TimeoutError) << "worker " << options_.worker << ": " << h.what() << ": no reply within "
                                 << tunables::timeout_s() << " s (COHORT_TIMEOUT_S)";
    }
  }
  wait_all(handles);
}

void Worker::finish() {
  if (finished_) return;
  finished_ = true;
  std::vector<Handle> handles;
  for (int s = 0; s < options_.num_servers; ++s)
    if (!client_->lost(s))
      handles.push_back(client_->request(Target::to_server(s), Message(Op::bye), nullptr,
                                         "bye to server " + std::to_string(s)));
  for (auto& h : handles) {
    try {
      h.wait_for(std::chrono::seconds(10));
    } catch (const std::exception&) {
      // A server that is gone needs no goodbye.
    }
  }
}

std::string Worker::server_stats(int server) {
  std::string text;
  client_->request(Target::to_server(server), Message(Op::stats), [&](Message& r) { text = r.text(0); },
                   "stats of server " + std::to_string(server))
      .wait();
  return text;
}

void Worker::on_server_lost(int server, const std::string& why) {
  // Mark it in the store first: a server that was only slow stops serving
  // when it sees the mark (server.h), so no partition has two owners.
  store_->compare_set(server_dead_key(server), "", "worker " + std::to_string(options_.worker) + ": " + why);
  for (int p = 0; p < options_.num_servers; ++p) {
    if (client_->route_of(p) != server) continue;
    int64_t seen;
    {
      std::lock_guard lock(seen_mutex_);
      seen = seen_version_[p];
    }
    std::vector<std::string> specs;
    for (const ShardInfo& s : layout_.partition_shards(p))
      specs.push_back(ShardSpec{s, layout_.variable(s.variable)}.encode());
    bool moved = false;
    std::string failure = "no live server is left";
    for (int i = 1; i < options_.num_servers && !moved; ++i) {
      const int successor = (server + i) % options_.num_servers;
      const std::vector<std::string> dead = {server_dead_key(successor)};
      if (client_->lost(successor) || store_->check(dead)) continue;
      Message m(Op::promote);
      m.header.partition = static_cast<uint32_t>(p);
      m.header.aux = static_cast<uint64_t>(server);
      m.header.version = seen;
      m.add(join_fields(specs));
      try {
        client_->request(Target::to_server(successor), std::move(m), nullptr,
                         "promotion of partition " + std::to_string(p) + " on server " + std::to_string(successor))
            .wait();
        {
          // Not across a rewind: the join names this timeline's clock.
          std::lock_guard lock(timeline_mutex_);
          Message join(Op::join);
          join.header.step = clock_.load();
          client_->reroute(p, successor, std::move(join));
        }
        COHORT_LOG(warn) << "worker " << options_.worker << ": partition " << p << " of lost server " << server
                         << " now served by server " << successor;
        moved = true;
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    if (!moved) {
      COHORT_LOG(error) << "worker " << options_.worker << ": partition " << p << " is lost: " << failure;
      client_->fail_partition(p, "partition " + std::to_string(p) + " of lost server " + std::to_string(server) +
                                     " cannot be restored: " + failure);
    }
  }
}

}  // namespace cohort::ps
