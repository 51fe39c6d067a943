#include "cohort/parameter_server/transport.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <variant>

#include "cohort/common/check.h"
#include "cohort/common/host_key.h"
#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/parameter_server/credentials.h"
#include "cohort/rendezvous/auth.h"

namespace cohort::ps {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- addresses

std::string ServerAddress::encode() const { return host_key + "\n" + tcp + "\n" + ipc + "\n" + tcp_security; }

ServerAddress ServerAddress::decode(std::string_view text) {
  const auto fields = split_fields(text);
  COHORT_CHECK_AS(ConfigError, fields.size() == 4 && (fields[3] == "curve" || fields[3] == "plain"))
      << "malformed parameter-server address record (" << fields.size() << " fields, expected 4)";
  return {fields[0], fields[1], fields[2], fields[3]};
}

std::string tcp_security_choice() {
  const std::string t = tunables::ps_tcp_security();
  COHORT_CHECK_AS(ConfigError, t == "curve" || t == "plain")
      << "COHORT_PS_TCP_SECURITY='" << t << "' must be curve or plain";
  return t;
}

std::string transport_choice() {
  const std::string t = tunables::ps_transport();
  COHORT_CHECK_AS(ConfigError, t == "auto" || t == "tcp" || t == "ipc")
      << "COHORT_PS_TRANSPORT='" << t << "' must be auto, tcp or ipc";
  return t;
}

ClientOptions client_options_from_env() {
  ClientOptions o;
  o.transport = transport_choice();
  o.heartbeat = Millis(std::max<int64_t>(1, tunables::ps_heartbeat_ms()));
  o.server_timeout = Millis(static_cast<int64_t>(tunables::ps_server_timeout_s() * 1000));
  o.reconnect_grace = Millis(std::max<int64_t>(0, tunables::ps_reconnect_grace_ms()));
  return o;
}

namespace {

constexpr int kMonitoredEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

std::atomic<uint64_t> monitor_counter{0};

// A PAIR socket receiving `socket`'s events.
zmq::socket_t monitor(zmq::context_t& context, zmq::socket_t& socket, int events) {
  const std::string endpoint = "inproc://cohort-ps-monitor-" + std::to_string(monitor_counter++);
  COHORT_CHECK(zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) == 0)
      << "zmq_socket_monitor: " << zmq_strerror(zmq_errno());
  zmq::socket_t pair(context, zmq::socket_type::pair);
  pair.set(zmq::sockopt::linger, 0);
  pair.connect(endpoint);
  return pair;
}

// One event from a monitor socket: {event, endpoint}; false when none.
bool read_event(zmq::socket_t& monitor, uint16_t& event, std::string& endpoint) {
  zmq::message_t head, address;
  if (!monitor.recv(head, zmq::recv_flags::dontwait)) return false;
  if (head.more()) (void)monitor.recv(address, zmq::recv_flags::none);
  if (head.size() < 6) return false;
  std::memcpy(&event, head.data(), 2);
  endpoint = address.to_string();
  return true;
}

void configure_common(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  // Requests never block or drop on a slow peer: a parameter server's
  // traffic is bounded by the workers' steps, not by queue limits.
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
}

std::string socket_directory() {
  const std::string dir = tunables::ps_ipc_dir();
  if (!dir.empty()) return dir;
  return ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

}  // namespace

// ------------------------------------------------------------------ server

struct ServerSocket::Zap {
  ZapHandler handler;
  Zap(zmq::context_t& c, std::string_view secret) : handler(c, secret) {}
};

ServerSocket::ServerSocket(const ServerSocketOptions& options) : context_(1) {
  COHORT_CHECK(zmq_has("ipc") || !options.ipc) << "this libzmq has no ipc:// transport";
  if (options.secret.empty())
    COHORT_LOG(warn) << "parameter server: empty job secret (COHORT_SECRET): anyone who can reach it may connect";
  zap_ = std::make_unique<Zap>(context_, options.secret);
  address_.host_key = net::host_key();
  const CurveKeys keys = derive_curve_keys(options.secret);
  router_ = zmq::socket_t(context_, zmq::socket_type::router);
  configure_common(router_);
  router_.set(zmq::sockopt::router_mandatory, 1);
  router_.set(zmq::sockopt::router_handover, 1);
  if (options.tcp_security == "plain")
    make_plain_server(router_);
  else
    make_curve_server(router_, keys);
  address_.tcp_security = options.tcp_security;
  monitor_ = monitor(context_, router_, kMonitoredEvents);
  if (!options.tcp_host.empty()) {
    try {
      router_.bind("tcp://" + options.tcp_host + ":*");
    } catch (const zmq::error_t& e) {
      COHORT_THROW(ConfigError) << "parameter server cannot listen on " << options.tcp_host << ": " << e.what();
    }
    address_.tcp = router_.get(zmq::sockopt::last_endpoint);
  }
  if (options.ipc) {
    ipc_router_ = zmq::socket_t(context_, zmq::socket_type::router);
    configure_common(ipc_router_);
    ipc_router_.set(zmq::sockopt::router_mandatory, 1);
    ipc_router_.set(zmq::sockopt::router_handover, 1);
    make_plain_server(ipc_router_);
    ipc_monitor_ = monitor(context_, ipc_router_, kMonitoredEvents);
    ipc_path_ = socket_directory() + "/cohort-" + options.job_id + "-ps-" +
                rendezvous::to_hex(rendezvous::random_bytes(6)) + ".sock";
    try {
      ipc_router_.bind("ipc://" + ipc_path_);
    } catch (const zmq::error_t& e) {
      COHORT_THROW(ConfigError) << "parameter server cannot listen on ipc://" << ipc_path_ << ": " << e.what()
                                << " (COHORT_PS_IPC_DIR)";
    }
    // Only this user may connect at all; the PLAIN password is checked on top.
    ::chmod(ipc_path_.c_str(), 0600);
    address_.ipc = "ipc://" + ipc_path_;
  }
  COHORT_CHECK_AS(ConfigError, !address_.tcp.empty() || !address_.ipc.empty())
      << "a parameter server needs a tcp or an ipc endpoint";
}

ServerSocket::~ServerSocket() {
  if (!ipc_path_.empty()) ::unlink(ipc_path_.c_str());
}

void ServerSocket::drain_monitor() {
  for (zmq::socket_t* m : {&monitor_, &ipc_monitor_}) {
    if (!*m) continue;
    uint16_t event;
    std::string endpoint;
    while (read_event(*m, event, endpoint)) {
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
          event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        ++failed_handshakes_;
        if (event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)  // the ZAP handler logged those
          COHORT_LOG(warn) << "parameter server: a peer failed the security handshake on " << endpoint
                           << " (not holding the job secret)";
      }
    }
  }
}

bool ServerSocket::wait(Millis timeout, int wake_fd) {
  std::vector<zmq::pollitem_t> items = {
      {router_.handle(), 0, ZMQ_POLLIN, 0},
      {zap_->handler.socket().handle(), 0, ZMQ_POLLIN, 0},
      {monitor_.handle(), 0, ZMQ_POLLIN, 0},
  };
  if (ipc_router_) {
    items.push_back({ipc_router_.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({ipc_monitor_.handle(), 0, ZMQ_POLLIN, 0});
  }
  const size_t wake_index = items.size();
  if (wake_fd >= 0) items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
  zmq::poll(items.data(), items.size(), timeout);
  if (items[1].revents & ZMQ_POLLIN) zap_->handler.handle();
  drain_monitor();
  return wake_fd >= 0 && (items[wake_index].revents & ZMQ_POLLIN);
}

bool ServerSocket::receive(Message& message, std::string& peer) {
  std::string route;
  for (auto [socket, tag] : {std::pair{&router_, 't'}, std::pair{&ipc_router_, 'i'}}) {
    if (!*socket) continue;
    if (receive_message(*socket, message, true, &route)) {
      peer = tag + route;
      return true;
    }
  }
  return false;
}

void ServerSocket::reply(const std::string& peer, Message& message) {
  zmq::socket_t& socket = peer[0] == 'i' ? ipc_router_ : router_;
  try {
    send_message(socket, message, std::string_view(peer).substr(1));
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the peer is gone; its request died with it.
    COHORT_LOG(debug) << "parameter server: reply to a departed peer dropped (" << e.what() << ")";
  }
}

int ServerSocket::refused() const { return failed_handshakes_.load(); }

// ------------------------------------------------------------------ client

namespace {

struct Pending {
  Target target;
  int server = -1;  // where it was last sent (-1: parked)
  Message message;
  ReplyFn on_reply;
  std::shared_ptr<HandleState> handle;  // null for replays of retained requests
  bool retain = false;
};

struct Peer {
  ServerAddress address;
  zmq::socket_t socket;
  zmq::socket_t monitor;
  bool lost = false;
  bool refused = false;
  Clock::time_point last_heard, last_sent;
  std::optional<Clock::time_point> disconnected_since;
};

struct Submit {
  Target target;
  Message message;
  ReplyFn on_reply;
  std::shared_ptr<HandleState> handle;
  bool retain;
};
struct AddServer {
  int server;
  ServerAddress address;
};
struct Reroute {
  int partition, server;
  Message preamble;
};
struct FailPartition {
  int partition;
  std::string why;
};
struct DeclareLost {
  int server;
  std::string why;
};
using Command = std::variant<Submit, AddServer, Reroute, FailPartition, DeclareLost>;

}  // namespace

struct Client::Impl {
  ClientOptions options;
  zmq::context_t context{1};
  int wake_fd = -1;
  std::atomic<bool> stopping{false};

  std::mutex mutex;  // commands, routes, lost flags, counters
  std::deque<Command> commands;
  std::map<int, int> routes;
  std::map<int, bool> lost_servers;
  TransportCounters counters;
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint64_t> timeline{0};

  // Owned by the I/O thread.
  std::map<int, Peer> peers;
  std::map<uint64_t, Pending> pending;
  std::map<int, std::map<uint64_t, Pending>> retained;  // by partition, then request id

  // Failover thread.
  std::function<void(int, const std::string&)> lost_handler;
  std::atomic<bool> has_lost_handler{false};  // set once lost_handler is
  std::mutex lost_mutex;
  std::condition_variable lost_cv;
  std::deque<std::pair<int, std::string>> lost_queue;
  bool failover_stopping = false;  // under lost_mutex
  std::thread failover_thread;
  std::thread io_thread;

  explicit Impl(ClientOptions o) : options(std::move(o)) {
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    COHORT_CHECK(wake_fd >= 0) << "eventfd: " << std::strerror(errno);
  }
  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  void post(Command c) {
    {
      std::lock_guard lock(mutex);
      commands.push_back(std::move(c));
    }
    wake();
  }

  // --- I/O thread

  void stamp(Message& m) {
    m.header.worker = options.worker;
    m.header.incarnation = options.incarnation;
  }

  void send_to(int server, Message& m) {
    Peer& peer = peers.at(server);
    stamp(m);
    size_t bytes = sizeof(Header);
    for (auto& f : m.frames) bytes += f.size();
    Message copy = m.share();  // ZeroMQ consumes what it sends; keep ours for resends
    send_message(peer.socket, copy);
    peer.last_sent = Clock::now();
    std::lock_guard lock(mutex);
    counters.bytes_sent += bytes;
  }

  int route_locked(int partition) {
    std::lock_guard lock(mutex);
    const auto it = routes.find(partition);
    return it == routes.end() ? -1 : it->second;
  }

  void dispatch(uint64_t id, Pending& p) {
    const int server = p.target.partition >= 0 ? route_locked(p.target.partition) : p.target.server;
    if (server < 0 || !peers.count(server)) {
      fail(p, std::make_exception_ptr(ConfigError("no route to " + describe(p.target))));
      return;
    }
    Peer& peer = peers.at(server);
    if (peer.refused) {
      fail(p, refused_error(server));
      return;
    }
    if (peer.lost) {
      if (p.target.partition < 0 || !has_lost_handler.load(std::memory_order_acquire)) {
        fail(p, lost_error(server, "lost"));
        return;
      }
      p.server = -1;  // parked until reroute
    } else {
      p.server = server;
      send_to(server, p.message);
    }
    pending.emplace(id, std::move(p));
  }

  static std::string describe(const Target& t) {
    return t.partition >= 0 ? "partition " + std::to_string(t.partition) : "server " + std::to_string(t.server);
  }

  std::exception_ptr lost_error(int server, const std::string& why) {
    return std::make_exception_ptr(PeerLostError("parameter server " + std::to_string(server) + " (" +
                                                     peers.at(server).address.tcp + ") is lost: " + why,
                                                 server));
  }
  std::exception_ptr refused_error(int server) {
    return std::make_exception_ptr(ConfigError(
        "parameter server " + std::to_string(server) + " refused this client's credentials: its COHORT_SECRET "
        "differs from the job's"));
  }

  void fail(Pending& p, std::exception_ptr e) {
    if (p.handle) p.handle->fail(std::move(e));
  }

  void connect(int server, const ServerAddress& address) {
    Peer peer;
    peer.address = address;
    peer.socket = zmq::socket_t(context, zmq::socket_type::dealer);
    configure_common(peer.socket);
    peer.socket.set(zmq::sockopt::routing_id, options.name + "." + std::to_string(options.incarnation) + ">" +
                                                  std::to_string(server));
    const bool same_host = address.host_key == net::host_key();
    const bool use_ipc = !address.ipc.empty() &&
                         (options.transport == "ipc" || (options.transport == "auto" && same_host) ||
                          address.tcp.empty());
    COHORT_CHECK_AS(ConfigError, use_ipc || !address.tcp.empty())
        << "parameter server " << server << " has no endpoint this client can use";
    if (use_ipc || address.tcp_security == "plain")
      make_plain_client(peer.socket, options.secret);
    else
      make_curve_client(peer.socket, derive_curve_keys(options.secret));
    peer.monitor = monitor(context, peer.socket, kMonitoredEvents);
    peer.socket.connect(use_ipc ? address.ipc : address.tcp);
    peer.last_heard = peer.last_sent = Clock::now();
    COHORT_LOG(debug) << options.name << ": server " << server << " at " << (use_ipc ? address.ipc : address.tcp);
    peers[server] = std::move(peer);
  }

  void run_commands() {
    std::deque<Command> batch;
    {
      std::lock_guard lock(mutex);
      batch.swap(commands);
    }
    for (auto& c : batch) {
      if (auto* s = std::get_if<Submit>(&c)) {
        const uint64_t id = s->message.header.request_id;
        Pending p{s->target, -1, std::move(s->message), std::move(s->on_reply), std::move(s->handle), s->retain};
        dispatch(id, p);
      } else if (auto* a = std::get_if<AddServer>(&c)) {
        connect(a->server, a->address);
      } else if (auto* r = std::get_if<Reroute>(&c)) {
        reroute(r->partition, r->server, r->preamble);
      } else if (auto* f = std::get_if<FailPartition>(&c)) {
        for (auto it = pending.begin(); it != pending.end();) {
          if (it->second.target.partition == f->partition) {
            fail(it->second, std::make_exception_ptr(PeerLostError(f->why, -1)));
            it = pending.erase(it);
          } else {
            ++it;
          }
        }
        retained.erase(f->partition);
      } else if (auto* d = std::get_if<DeclareLost>(&c)) {
        mark_lost(d->server, d->why);
      }
    }
  }

  void reroute(int partition, int server, Message& preamble) {
    {
      std::lock_guard lock(mutex);
      routes[partition] = server;
    }
    Peer& peer = peers.at(server);
    if (peer.lost) return;  // the handler will be called for this one too
    // The preamble (a join) names the first step whose requests follow, so
    // the new owner counts none of this worker's steps from there as done.
    int64_t first_step = preamble.header.step;
    for (auto& [id, p] : retained[partition]) first_step = std::min(first_step, p.message.header.step);
    for (auto& [id, p] : pending)
      if (p.target.partition == partition) first_step = std::min(first_step, p.message.header.step);
    preamble.header.step = first_step;
    send_to(server, preamble);
    // Retained (already answered) and pending requests, in the order they
    // were first sent: the new owner sees the same sequence the old one did.
    std::map<uint64_t, Message*> order;
    for (auto& [id, p] : retained[partition]) order[id] = &p.message;
    for (auto& [id, p] : pending)
      if (p.target.partition == partition) {
        order[id] = &p.message;
        p.server = server;
      }
    for (auto& [id, m] : order) send_to(server, *m);
  }

  void settle(int partition, int64_t settled) {
    auto it = retained.find(partition);
    if (it == retained.end()) return;
    for (auto r = it->second.begin(); r != it->second.end();) {
      if (r->second.message.header.step < settled)
        r = it->second.erase(r);
      else
        ++r;
    }
  }

  void on_reply(int server, Message& reply) {
    Peer& peer = peers.at(server);
    peer.last_heard = Clock::now();
    {
      size_t bytes = sizeof(Header);
      for (auto& f : reply.frames) bytes += f.size();
      std::lock_guard lock(mutex);
      counters.bytes_received += bytes;
    }
    const Header& h = reply.header;
    if (h.magic != kWireMagic) return;
    if (h.partition != kNoPartition && route_locked(static_cast<int>(h.partition)) == server)
      settle(static_cast<int>(h.partition), h.settled);
    const auto it = pending.find(h.request_id);
    if (it == pending.end() || it->second.server != server) return;  // a ping, or a replay's reply
    Pending p = std::move(it->second);
    pending.erase(it);
    if (h.status != static_cast<uint16_t>(Status::ok)) {
      const std::string text = reply.frames.empty() ? "error" : std::string(reply.text(0));
      fail(p, std::make_exception_ptr(Error("parameter server " + std::to_string(server) + ": " +
                                            op_name(p.message.header.kind()) + ": " + text)));
      return;
    }
    try {
      if (p.on_reply) p.on_reply(reply);
      if (p.handle) p.handle->complete();
    } catch (...) {
      fail(p, std::current_exception());
    }
    if (p.retain && p.target.partition >= 0 && p.message.header.step >= h.settled) {
      p.handle.reset();
      p.on_reply = nullptr;
      retained[p.target.partition].emplace(h.request_id, std::move(p));
    }
  }

  void mark_lost(int server, const std::string& why) {
    Peer& peer = peers.at(server);
    if (peer.lost) return;
    peer.lost = true;
    {
      std::lock_guard lock(mutex);
      lost_servers[server] = true;
    }
    COHORT_LOG(warn) << options.name << ": parameter server " << server << " is lost: " << why;
    for (auto it = pending.begin(); it != pending.end();) {
      Pending& p = it->second;
      if (p.server != server) {
        ++it;
        continue;
      }
      if (p.target.partition >= 0 && has_lost_handler.load(std::memory_order_acquire)) {
        p.server = -1;
        ++it;
      } else {
        fail(p, lost_error(server, why));
        it = pending.erase(it);
      }
    }
    if (has_lost_handler.load(std::memory_order_acquire)) {
      std::lock_guard lock(lost_mutex);
      lost_queue.emplace_back(server, why);
      lost_cv.notify_all();
    }
  }

  void mark_refused(int server) {
    Peer& peer = peers.at(server);
    if (peer.refused) return;
    peer.refused = true;
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.server == server) {
        fail(it->second, refused_error(server));
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
  }

  void timers() {
    const auto now = Clock::now();
    for (auto& [server, peer] : peers) {
      if (peer.lost || peer.refused) continue;
      if (now - peer.last_heard > options.server_timeout) {
        mark_lost(server, "no reply for " + std::to_string(options.server_timeout.count()) + " ms");
        continue;
      }
      if (peer.disconnected_since && now - *peer.disconnected_since > options.reconnect_grace) {
        mark_lost(server, "its connection closed");
        continue;
      }
      if (now - peer.last_sent >= options.heartbeat) {
        Message ping(Op::ping);
        send_to(server, ping);
      }
    }
  }

  void loop() {
    while (!stopping.load()) {
      std::vector<zmq::pollitem_t> items = {{nullptr, wake_fd, ZMQ_POLLIN, 0}};
      std::vector<int> order;
      for (auto& [server, peer] : peers) {
        items.push_back({peer.socket.handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({peer.monitor.handle(), 0, ZMQ_POLLIN, 0});
        order.push_back(server);
      }
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(options.heartbeat / 2 + Millis(1)));
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        throw;
      }
      if (items[0].revents & ZMQ_POLLIN) {
        uint64_t n;
        [[maybe_unused]] auto r = ::read(wake_fd, &n, sizeof n);
      }
      run_commands();
      for (size_t i = 0; i < order.size(); ++i) {
        const int server = order[i];
        Peer& peer = peers.at(server);
        uint16_t event;
        std::string endpoint;
        while (read_event(peer.monitor, event, endpoint)) {
          if (event == ZMQ_EVENT_DISCONNECTED) {
            if (!peer.disconnected_since) peer.disconnected_since = Clock::now();
          } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || event == ZMQ_EVENT_CONNECTED) {
            if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) peer.disconnected_since.reset();
          } else {
            mark_refused(server);
          }
        }
        Message reply;
        while (receive_message(peer.socket, reply, false, nullptr)) on_reply(server, reply);
      }
      timers();
    }
  }

  void failover_loop() {
    while (true) {
      std::pair<int, std::string> item;
      {
        std::unique_lock lock(lost_mutex);
        lost_cv.wait(lock, [&] { return stopping.load() || failover_stopping || !lost_queue.empty(); });
        if (stopping.load() || failover_stopping) return;
        item = std::move(lost_queue.front());
        lost_queue.pop_front();
      }
      try {
        lost_handler(item.first, item.second);
      } catch (const std::exception& e) {
        COHORT_LOG(error) << options.name << ": failover after losing server " << item.first << " failed: " << e.what();
      }
    }
  }
};

Client::Client(ClientOptions options) : options_(options), impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->io_thread = std::thread([this] { impl_->loop(); });
}

Client::~Client() {
  impl_->stopping = true;
  impl_->wake();
  impl_->lost_cv.notify_all();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
  if (impl_->failover_thread.joinable()) impl_->failover_thread.join();
  for (auto& [id, p] : impl_->pending)
    if (p.handle) p.handle->fail(std::make_exception_ptr(Error("parameter-server client closed")));
  {
    std::lock_guard lock(impl_->mutex);
    for (auto& c : impl_->commands)
      if (auto* s = std::get_if<Submit>(&c))
        if (s->handle) s->handle->fail(std::make_exception_ptr(Error("parameter-server client closed")));
  }
  impl_->peers.clear();
}

void Client::add_server(int server, const ServerAddress& address) { impl_->post(AddServer{server, address}); }

void Client::route(int partition, int server) {
  std::lock_guard lock(impl_->mutex);
  impl_->routes[partition] = server;
}

int Client::route_of(int partition) const { return impl_->route_locked(partition); }

Handle Client::request(Target target, Message message, ReplyFn on_reply, std::string what, RequestOptions options) {
  auto state = std::make_shared<HandleState>(std::move(what));
  submit(target, std::move(message), std::move(on_reply), state, options);
  return Handle(std::move(state));
}

void Client::request_part(const std::shared_ptr<HandleState>& group, Target target, Message message,
                          ReplyFn on_reply, std::string what, RequestOptions options) {
  submit(target, std::move(message), std::move(on_reply), std::make_shared<HandleState>(std::move(what), group),
         options);
}

void Client::submit(Target target, Message message, ReplyFn on_reply, std::shared_ptr<HandleState> state,
                    RequestOptions options) {
  message.header.request_id = impl_->next_id++;
  message.header.timeline = impl_->timeline.load();
  if (target.partition >= 0) message.header.partition = static_cast<uint32_t>(target.partition);
  {
    std::lock_guard lock(impl_->mutex);
    ++impl_->counters.requests;
  }
  impl_->post(Submit{target, std::move(message), std::move(on_reply), std::move(state), options.retain});
}

void Client::set_lost_handler(std::function<void(int, const std::string&)> handler) {
  COHORT_CHECK(!impl_->has_lost_handler.load()) << "the lost handler is set once";
  impl_->lost_handler = std::move(handler);
  impl_->has_lost_handler.store(true, std::memory_order_release);
  if (!impl_->failover_thread.joinable()) impl_->failover_thread = std::thread([this] { impl_->failover_loop(); });
}

void Client::reroute(int partition, int server, Message preamble) {
  preamble.header.partition = static_cast<uint32_t>(partition);
  preamble.header.timeline = impl_->timeline.load();
  impl_->post(Reroute{partition, server, std::move(preamble)});
}

void Client::fail_partition(int partition, const std::string& why) { impl_->post(FailPartition{partition, why}); }

void Client::declare_lost(int server, const std::string& why) { impl_->post(DeclareLost{server, why}); }

void Client::stop_failover() {
  {
    std::lock_guard lock(impl_->lost_mutex);
    impl_->failover_stopping = true;
  }
  impl_->lost_cv.notify_all();
  if (impl_->failover_thread.joinable()) impl_->failover_thread.join();
}

void Client::set_timeline(uint64_t timeline) { impl_->timeline = timeline; }

uint64_t Client::timeline() const { return impl_->timeline.load(); }

bool Client::lost(int server) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->lost_servers.find(server);
  return it != impl_->lost_servers.end() && it->second;
}

TransportCounters Client::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace cohort::ps
