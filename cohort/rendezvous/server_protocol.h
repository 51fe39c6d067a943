// ServerProtocol: the TCP store server without its sockets (internal to
// cohort_rendezvous, its tests and its fuzzers).
//
// It holds the store's data, the requests parked on it, and each
// connection's protocol state: the handshake (auth.h), the frame keys and
// sequence numbers, the bytes received but not yet parsed and the bytes to
// send. TcpStoreServer moves bytes between it and the sockets; a fuzzer
// feeds it bytes directly. Single-threaded: one caller at a time.
//
// A connection starts in the handshake, with the server hello queued. A
// client that proves the secret is `open` and served; one that does not (a
// wrong proof, another protocol, a malformed or oversized handshake frame, a
// request before the handshake) gets one error frame and is `draining`: the
// socket layer sends the refusal, shuts its side down, and closes the
// connection when the peer does or at the drain deadline. An authenticated
// client that sends a malformed frame, a frame that fails its tag, or that
// does not read its replies is dropped at once (`ended`). A handshake that
// has not finished by the handshake deadline is ended too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/store.h"
#include "cohort/rendezvous/wire.h"

namespace cohort::rendezvous {

struct ServerProtocolOptions {
  std::string secret;                   // the job secret clients must prove
  std::string where = "store server";  // names the server in log lines
  // A connection still in the handshake this long after it opened is ended.
  Duration handshake_timeout{std::chrono::seconds(10)};
  // After refusing a stranger, how long its refusal may take to drain.
  Duration drain_time{std::chrono::seconds(2)};
  // Server nonces; random_bytes(kAuthNonceBytes) when empty (fuzzers make
  // them deterministic).
  std::function<std::string()> make_nonce;
};

class ServerProtocol {
 public:
  using Clock = std::chrono::steady_clock;
  using ConnectionId = uint64_t;
  enum class Phase { handshake, open, draining, ended };

  explicit ServerProtocol(ServerProtocolOptions options);
  ~ServerProtocol();
  ServerProtocol(const ServerProtocol&) = delete;
  ServerProtocol& operator=(const ServerProtocol&) = delete;

  // A new connection from `peer` (for messages); the server hello is queued.
  ConnectionId open(std::string peer, Clock::time_point now);
  // Bytes that arrived on `id`: complete frames are handled, and their
  // answers queued. Ignored unless the connection is in the handshake or open.
  void receive(ConnectionId id, std::string_view bytes, Clock::time_point now);
  // The connection is gone (closed by the peer, an I/O error, or ended here):
  // forgets it and its parked requests. Unknown ids are ignored.
  void close(ConnectionId id);
  // Answers parked requests whose time is up, and ends handshakes and drains
  // past their deadlines.
  void expire(Clock::time_point now);
  // When expire() next has something to do; nullopt when nothing is due.
  std::optional<Clock::time_point> next_deadline() const;

  // ended for an unknown (closed) id.
  Phase phase(ConnectionId id) const;
  // What is queued for `id` and not yet sent; consume() what was sent.
  std::string_view output(ConnectionId id) const;
  void consume(ConnectionId id, size_t bytes);

  // Connections with new output, and connections ended by the protocol (to
  // be closed by the caller, which then calls close()), since the last call.
  std::vector<ConnectionId> take_written();
  std::vector<ConnectionId> take_ended();

  // Connections still in the handshake.
  int handshaking() const { return handshaking_; }
  // Connections refused so far (wrong secret, another protocol, ...).
  int refused() const { return refused_; }
  size_t connections() const { return conns_.size(); }
  size_t keys() const { return data_.size(); }

 private:
  struct Connection;
  struct Waiter {
    ConnectionId conn = 0;
    uint64_t request = 0;
    wire::Op op = wire::Op::get;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  Connection* find(ConnectionId id) const;
  void process_frames(Connection& c, Clock::time_point now);
  void handshake(Connection& c, std::string_view body, Clock::time_point now);
  void handle_request(Connection& c, std::string_view payload, Clock::time_point now);
  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const;
  void queue(Connection& c, std::string frame);
  template <typename Fields>
  void reply(Connection& c, uint64_t request, wire::Status status, Fields&& fields);
  void refuse(Connection& c, const std::string& reason, Clock::time_point now);
  void drop(Connection& c, const std::string& reason);
  void end(Connection& c);
  void release(Connection& c);
  void leave_handshake(Connection& c);
  void set_deadline(Connection& c, std::optional<Clock::time_point> deadline);
  void park(Connection& c, uint64_t request, wire::Op op, std::vector<std::string> keys, int64_t timeout_ms,
            Clock::time_point now);
  std::optional<Waiter> erase_waiter(uint64_t waiter);
  void notify(const std::string& key);

  ServerProtocolOptions options_;
  std::unordered_map<ConnectionId, std::unique_ptr<Connection>> conns_;
  ConnectionId next_conn_ = 1;
  std::vector<ConnectionId> written_;
  std::vector<ConnectionId> ended_;
  // Handshake and drain deadlines.
  std::set<std::pair<Clock::time_point, ConnectionId>> conn_deadlines_;
  int handshaking_ = 0;
  int refused_ = 0;

  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<uint64_t, Waiter> waiters_;
  uint64_t next_waiter_ = 1;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_by_key_;
  std::set<std::pair<Clock::time_point, uint64_t>> waiter_deadlines_;
};

}  // namespace cohort::rendezvous
