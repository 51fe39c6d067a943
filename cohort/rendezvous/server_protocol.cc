#include "cohort/rendezvous/server_protocol.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/rendezvous/store_util.h"

namespace cohort::rendezvous {
namespace {

using wire::Op;
using wire::Status;

// A client that stops reading its replies is dropped past this backlog.
constexpr size_t kMaxPendingOutput = size_t{256} << 20;
constexpr const char* kRefusedMessage =
    "authentication failed: the client could not prove that it knows the store's secret";

int64_t ms(Duration d) { return d.count(); }

void write_keys(wire::Writer& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.bytes(k);
}

std::vector<std::string> read_keys(wire::Reader& r) {
  const uint32_t n = r.count(4);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) keys.push_back(r.bytes());
  return keys;
}

}  // namespace

struct ServerProtocol::Connection {
  ConnectionId id = 0;
  std::string peer;
  Phase phase = Phase::handshake;
  std::string nonce;  // the server nonce of the handshake
  std::optional<FrameMac> from_client;
  std::optional<FrameMac> to_client;
  std::string in;
  std::string out;
  size_t out_off = 0;
  std::vector<uint64_t> waiters;
  std::optional<Clock::time_point> deadline;  // of the handshake or the drain
};

ServerProtocol::ServerProtocol(ServerProtocolOptions options) : options_(std::move(options)) {}

ServerProtocol::~ServerProtocol() = default;

ServerProtocol::Connection* ServerProtocol::find(ConnectionId id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

ServerProtocol::ConnectionId ServerProtocol::open(std::string peer, Clock::time_point now) {
  auto c = std::make_unique<Connection>();
  c->id = next_conn_++;
  c->peer = std::move(peer);
  c->nonce = options_.make_nonce ? options_.make_nonce() : random_bytes(kAuthNonceBytes);
  COHORT_CHECK_EQ(c->nonce.size(), kAuthNonceBytes) << "server nonce";
  ++handshaking_;
  set_deadline(*c, detail::deadline_after(now, options_.handshake_timeout));
  queue(*c, wire::Writer().raw(wire::kHelloMagic).raw(c->nonce).finish());
  const ConnectionId id = c->id;
  conns_.emplace(id, std::move(c));
  return id;
}

void ServerProtocol::receive(ConnectionId id, std::string_view bytes, Clock::time_point now) {
  Connection* c = find(id);
  if (!c || (c->phase != Phase::handshake && c->phase != Phase::open)) return;
  c->in.append(bytes);
  process_frames(*c, now);
}

void ServerProtocol::process_frames(Connection& c, Clock::time_point now) {
  auto serving = [&c] { return c.phase == Phase::handshake || c.phase == Phase::open; };
  size_t off = 0;
  while (serving() && c.in.size() - off >= 4) {
    const uint32_t len = wire::decode_u32(c.in.data() + off);
    if (c.phase == Phase::handshake && len > wire::kMaxHandshakeFrameBytes) {
      refuse(c, "sent a " + std::to_string(len) + "-byte frame instead of the handshake", now);
      break;
    }
    if (len > wire::kMaxFrameBytes + kAuthMacBytes) {
      drop(c, "sent a frame of " + std::to_string(len) + " bytes, over the limit of " +
                  std::to_string(wire::kMaxFrameBytes));
      break;
    }
    if (c.in.size() - off - 4 < len) break;
    const std::string_view body(c.in.data() + off + 4, len);
    off += 4 + size_t{len};
    const bool in_handshake = c.phase == Phase::handshake;
    try {
      if (in_handshake) {
        handshake(c, body, now);
        continue;
      }
      const std::optional<std::string_view> payload = wire::open_sealed(*c.from_client, body);
      if (!payload) {
        drop(c, "sent a frame that fails its integrity check (altered, replayed, reordered, or not "
                "from the client that authenticated)");
        break;
      }
      handle_request(c, *payload, now);
    } catch (const wire::ProtocolError& e) {
      if (in_handshake)
        refuse(c, std::string("sent a malformed handshake (") + e.what() + ")", now);
      else
        drop(c, std::string("sent a malformed frame (") + e.what() + ")");
    } catch (const std::exception& e) {
      // Out of memory for one request, say: lose that client, keep serving.
      drop(c, std::string("its request failed: ") + e.what());
    }
  }
  if (serving())
    c.in.erase(0, off);
  else
    c.in.clear();
}

void ServerProtocol::handshake(Connection& c, std::string_view body, Clock::time_point now) {
  wire::Reader r(body);
  if (r.raw(std::min(body.size(), wire::kHelloMagic.size())) != wire::kHelloMagic) {
    refuse(c, "did not greet as a cohort store client (another program, or another cohort version)", now);
    return;
  }
  const std::string_view client_nonce = r.raw(kAuthNonceBytes);
  const std::string_view proof = r.raw(kAuthMacBytes);
  r.done();
  if (!verify_handshake_proof(Prover::client, options_.secret, c.nonce, client_nonce, proof)) {
    refuse(c, "wrong secret", now);
    return;
  }
  const SessionKeys keys = session_keys(options_.secret, c.nonce, client_nonce);
  c.from_client.emplace(keys.client_to_server);
  c.to_client.emplace(keys.server_to_client);
  const std::string server_proof = handshake_proof(Prover::server, options_.secret, c.nonce, client_nonce);
  leave_handshake(c);
  c.phase = Phase::open;
  set_deadline(c, std::nullopt);
  queue(c, wire::Writer().u8(static_cast<uint8_t>(Status::ok)).raw(server_proof).finish());
  COHORT_LOG(debug) << options_.where << ": " << c.peer << " authenticated";
}

void ServerProtocol::handle_request(Connection& c, std::string_view payload, Clock::time_point now) {
  wire::Reader r(payload);
  const uint64_t id = r.u64();
  const auto op = static_cast<Op>(r.u8());
  switch (op) {
    case Op::set: {
      std::string key = r.bytes();
      std::string value = r.bytes();
      r.done();
      data_[key] = std::move(value);
      reply(c, id, Status::ok, [](wire::Writer&) {});
      notify(key);
      return;
    }
    case Op::get: {
      std::string key = r.bytes();
      const int64_t timeout_ms = r.i64();
      r.done();
      if (auto it = data_.find(key); it != data_.end()) {
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(it->second); });
      } else if (timeout_ms <= 0) {
        reply(c, id, Status::timeout, [](wire::Writer&) {});
      } else {
        park(c, id, Op::get, {std::move(key)}, timeout_ms, now);
      }
      return;
    }
    case Op::add: {
      std::string key = r.bytes();
      const int64_t delta = r.i64();
      r.done();
      int64_t result;
      try {
        auto it = data_.find(key);
        result = detail::add_to_counter(options_.where, key, it == data_.end() ? nullptr : &it->second, delta);
      } catch (const Error& e) {
        reply(c, id, Status::error, [&](wire::Writer& w) { w.bytes(e.what()); });
        return;
      }
      data_[key] = std::to_string(result);
      reply(c, id, Status::ok, [&](wire::Writer& w) { w.i64(result); });
      notify(key);
      return;
    }
    case Op::compare_set: {
      std::string key = r.bytes();
      std::string expected = r.bytes();
      std::string desired = r.bytes();
      r.done();
      auto it = data_.find(key);
      const bool swap = it == data_.end() ? expected.empty() : it->second == expected;
      if (!swap) {
        // The current value, or empty for an absent key that stays absent.
        const std::string current = it == data_.end() ? std::string() : it->second;
        reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(current); });
        return;
      }
      data_[key] = desired;
      reply(c, id, Status::ok, [&](wire::Writer& w) { w.bytes(desired); });
      notify(key);
      return;
    }
    case Op::wait: {
      std::vector<std::string> keys = read_keys(r);
      const int64_t timeout_ms = r.i64();
      r.done();
      std::vector<std::string> missing = missing_keys(keys);
      if (missing.empty()) {
        reply(c, id, Status::ok, [](wire::Writer&) {});
      } else if (timeout_ms <= 0) {
        reply(c, id, Status::timeout, [&](wire::Writer& w) { write_keys(w, missing); });
      } else {
        park(c, id, Op::wait, std::move(keys), timeout_ms, now);
      }
      return;
    }
    case Op::check: {
      const std::vector<std::string> keys = read_keys(r);
      r.done();
      const bool all = missing_keys(keys).empty();
      reply(c, id, Status::ok, [&](wire::Writer& w) { w.u8(all ? 1 : 0); });
      return;
    }
    case Op::remove: {
      std::string key = r.bytes();
      r.done();
      const bool existed = data_.erase(key) > 0;
      reply(c, id, Status::ok, [&](wire::Writer& w) { w.u8(existed ? 1 : 0); });
      return;
    }
  }
  throw wire::ProtocolError("unknown operation " + std::to_string(static_cast<int>(op)));
}

std::vector<std::string> ServerProtocol::missing_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!data_.contains(k)) missing.push_back(k);
  return missing;
}

void ServerProtocol::queue(Connection& c, std::string frame) {
  if (c.out.empty()) written_.push_back(c.id);
  c.out += frame;
}

template <typename Fields>
void ServerProtocol::reply(Connection& c, uint64_t request, Status status, Fields&& fields) {
  if (c.phase != Phase::open) return;
  if (c.out.size() - c.out_off > kMaxPendingOutput) {
    drop(c, "does not read its replies");
    return;
  }
  wire::Writer w;
  w.u64(request).u8(static_cast<uint8_t>(status));
  fields(w);
  queue(c, w.finish_sealed(*c.to_client));
}

// A stranger: one error frame, a warning with its address, a count, and the
// door once the refusal has drained.
void ServerProtocol::refuse(Connection& c, const std::string& reason, Clock::time_point now) {
  ++refused_;
  COHORT_LOG(warn) << options_.where << ": refused the connection from " << c.peer << ": " << reason
                   << " (a client must prove the job's COHORT_SECRET; it was not served)";
  leave_handshake(c);
  c.phase = Phase::draining;
  set_deadline(c, detail::deadline_after(now, options_.drain_time));
  queue(c, wire::Writer().u8(static_cast<uint8_t>(Status::error)).bytes(kRefusedMessage).finish());
}

void ServerProtocol::drop(Connection& c, const std::string& reason) {
  COHORT_LOG(warn) << options_.where << ": dropping client " << c.peer << ": " << reason;
  end(c);
}

void ServerProtocol::end(Connection& c) {
  if (c.phase == Phase::ended) return;
  release(c);
  c.in.clear();
  c.out.clear();
  c.out_off = 0;
  ended_.push_back(c.id);
}

void ServerProtocol::close(ConnectionId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  release(*it->second);
  conns_.erase(it);
}

// Leaves the handshake count, the parked requests and the deadlines.
void ServerProtocol::release(Connection& c) {
  leave_handshake(c);
  c.phase = Phase::ended;
  std::vector<uint64_t> parked;
  parked.swap(c.waiters);
  for (uint64_t w : parked) erase_waiter(w);
  set_deadline(c, std::nullopt);
}

void ServerProtocol::leave_handshake(Connection& c) {
  if (c.phase == Phase::handshake) --handshaking_;
}

void ServerProtocol::set_deadline(Connection& c, std::optional<Clock::time_point> deadline) {
  if (c.deadline) conn_deadlines_.erase({*c.deadline, c.id});
  c.deadline = deadline;
  if (deadline) conn_deadlines_.emplace(*deadline, c.id);
}

ServerProtocol::Phase ServerProtocol::phase(ConnectionId id) const {
  const Connection* c = find(id);
  return c ? c->phase : Phase::ended;
}

std::string_view ServerProtocol::output(ConnectionId id) const {
  const Connection* c = find(id);
  if (!c) return {};
  return std::string_view(c->out).substr(c->out_off);
}

void ServerProtocol::consume(ConnectionId id, size_t bytes) {
  Connection* c = find(id);
  if (!c) return;
  c->out_off = std::min(c->out.size(), c->out_off + bytes);
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
  } else if (c->out_off > (size_t{1} << 20)) {
    c->out.erase(0, c->out_off);
    c->out_off = 0;
  }
}

std::vector<ServerProtocol::ConnectionId> ServerProtocol::take_written() {
  std::vector<ConnectionId> ids;
  ids.swap(written_);
  return ids;
}

std::vector<ServerProtocol::ConnectionId> ServerProtocol::take_ended() {
  std::vector<ConnectionId> ids;
  ids.swap(ended_);
  return ids;
}

// --- parked requests ------------------------------------------------------

void ServerProtocol::park(Connection& c, uint64_t request, Op op, std::vector<std::string> keys,
                          int64_t timeout_ms, Clock::time_point now) {
  const uint64_t wid = next_waiter_++;
  Waiter w{c.id, request, op, std::move(keys), detail::deadline_after(now, Duration(timeout_ms))};
  for (const auto& k : w.keys) waiters_by_key_[k].push_back(wid);
  waiter_deadlines_.emplace(w.deadline, wid);
  c.waiters.push_back(wid);
  waiters_.emplace(wid, std::move(w));
}

std::optional<ServerProtocol::Waiter> ServerProtocol::erase_waiter(uint64_t wid) {
  auto it = waiters_.find(wid);
  if (it == waiters_.end()) return std::nullopt;
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  for (const auto& k : w.keys) {
    auto kit = waiters_by_key_.find(k);
    if (kit == waiters_by_key_.end()) continue;
    std::erase(kit->second, wid);
    if (kit->second.empty()) waiters_by_key_.erase(kit);
  }
  waiter_deadlines_.erase({w.deadline, wid});
  if (Connection* c = find(w.conn)) std::erase(c->waiters, wid);
  return w;
}

// `key` changed: answer every parked request whose keys now all exist.
void ServerProtocol::notify(const std::string& key) {
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) return;
  const std::vector<uint64_t> ids = it->second;  // erase_waiter edits the index
  for (uint64_t wid : ids) {
    auto wit = waiters_.find(wid);
    if (wit == waiters_.end() || !missing_keys(wit->second.keys).empty()) continue;
    std::optional<Waiter> w = erase_waiter(wid);
    Connection* c = find(w->conn);
    if (!c) continue;
    if (w->op == Op::get) {
      const Bytes& value = data_.at(w->keys.front());
      reply(*c, w->request, Status::ok, [&](wire::Writer& wr) { wr.bytes(value); });
    } else {
      reply(*c, w->request, Status::ok, [](wire::Writer&) {});
    }
  }
}

void ServerProtocol::expire(Clock::time_point now) {
  while (!waiter_deadlines_.empty() && waiter_deadlines_.begin()->first <= now) {
    std::optional<Waiter> w = erase_waiter(waiter_deadlines_.begin()->second);
    if (!w) {
      waiter_deadlines_.erase(waiter_deadlines_.begin());  // stale entry; never loop on it
      continue;
    }
    Connection* c = find(w->conn);
    if (!c) continue;
    if (w->op == Op::get) {
      reply(*c, w->request, Status::timeout, [](wire::Writer&) {});
    } else {
      const std::vector<std::string> missing = missing_keys(w->keys);
      reply(*c, w->request, Status::timeout, [&](wire::Writer& wr) { write_keys(wr, missing); });
    }
  }
  while (!conn_deadlines_.empty() && conn_deadlines_.begin()->first <= now) {
    const ConnectionId id = conn_deadlines_.begin()->second;
    conn_deadlines_.erase(conn_deadlines_.begin());
    Connection* c = find(id);
    if (!c) continue;
    c->deadline.reset();
    if (c->phase == Phase::handshake)
      COHORT_LOG(warn) << options_.where << ": closing the connection from " << c->peer
                       << ": its handshake did not finish within " << ms(options_.handshake_timeout) << " ms";
    end(*c);
  }
}

std::optional<ServerProtocol::Clock::time_point> ServerProtocol::next_deadline() const {
  std::optional<Clock::time_point> next;
  if (!waiter_deadlines_.empty()) next = waiter_deadlines_.begin()->first;
  if (!conn_deadlines_.empty())
    next = std::min(next.value_or(conn_deadlines_.begin()->first), conn_deadlines_.begin()->first);
  return next;
}

}  // namespace cohort::rendezvous
