// TcpStore and TcpStoreServer over real sockets: concurrency, the secret,
// hostile peers, port conflicts, lost servers and connection retries.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/rendezvous/wire.h"
#include "test_util.h"

namespace cohort::rendezvous::tcp_store_test {
namespace {

using namespace std::chrono_literals;
using testing::RawSocket;

constexpr const char* kSecret = "the-job-secret";

std::unique_ptr<TcpStoreServer> start_server(std::string secret = kSecret) {
  return std::make_unique<TcpStoreServer>(
      TcpStoreServerOptions{.host = "127.0.0.1", .port = 0, .secret = std::move(secret)});
}

std::unique_ptr<TcpStore> client(int port, std::string secret = kSecret, std::string host = "127.0.0.1",
                                 Duration connect_timeout = 10s) {
  return std::make_unique<TcpStore>(TcpStoreOptions{
      .host = std::move(host), .port = port, .secret = std::move(secret), .connect_timeout = connect_timeout});
}

// Reads the server's greeting and returns the nonce.
std::string read_hello(RawSocket& s) {
  auto header = s.recv_exact(4);
  EXPECT_TRUE(header.has_value());
  const uint32_t len = wire::decode_u32(header->data());
  EXPECT_EQ(len, wire::kHelloMagic.size() + kAuthNonceBytes);
  auto payload = s.recv_exact(len);
  EXPECT_TRUE(payload.has_value());
  EXPECT_TRUE(payload->starts_with(wire::kHelloMagic));
  return payload->substr(wire::kHelloMagic.size());
}

// The client's greeting for `server_nonce`, with a fresh client nonce
// (returned in `client_nonce`).
std::string greeting(const std::string& secret, const std::string& server_nonce, std::string* client_nonce = nullptr) {
  const std::string nc = random_bytes(kAuthNonceBytes);
  if (client_nonce) *client_nonce = nc;
  return wire::Writer()
      .raw(wire::kHelloMagic)
      .raw(nc)
      .raw(handshake_proof(Prover::client, secret, server_nonce, nc))
      .finish();
}

// A raw connection that did the handshake the way TcpStore does: requests
// are sealed with to_server.
struct RawSession {
  explicit RawSession(int port) : socket(port) {}
  RawSocket socket;
  std::optional<FrameMac> to_server;
  std::optional<FrameMac> from_server;
};

void raw_authenticate(RawSession& s, const std::string& secret) {
  const std::string ns = read_hello(s.socket);
  std::string nc;
  ASSERT_TRUE(s.socket.send(greeting(secret, ns, &nc)));
  auto answer = s.socket.recv_frame();
  ASSERT_TRUE(answer.has_value());
  wire::Reader r(*answer);
  ASSERT_EQ(r.u8(), static_cast<uint8_t>(wire::Status::ok));
  ASSERT_TRUE(verify_handshake_proof(Prover::server, secret, ns, nc, r.raw(kAuthMacBytes)));
  const SessionKeys keys = session_keys(secret, ns, nc);
  s.to_server.emplace(keys.client_to_server);
  s.from_server.emplace(keys.server_to_client);
}

// The status of the refusal frame a stranger gets.
void expect_refusal(RawSocket& s) {
  auto answer = s.recv_frame();
  ASSERT_TRUE(answer.has_value());
  wire::Reader r(*answer);
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(wire::Status::error));
  EXPECT_NE(r.bytes().find("authentication failed"), std::string::npos);
}

TEST(TcpStoreTest, SixteenClientsAddConcurrently) {
  auto server = start_server();
  constexpr int kThreads = 16;
  constexpr int kAdds = 200;
  std::deque<testing::Worker> threads;
  std::atomic<int64_t> max_seen{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto c = client(server->port());
      for (int i = 0; i < kAdds; ++i) {
        const int64_t v = c->add("total", 1);
        int64_t prev = max_seen.load();
        while (v > prev && !max_seen.compare_exchange_weak(prev, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto c = client(server->port());
  EXPECT_EQ(c->get("total", 1s), std::to_string(kThreads * kAdds));
  EXPECT_EQ(max_seen.load(), kThreads * kAdds);
  EXPECT_EQ(server->refused_count(), 0);
}

TEST(TcpStoreTest, OneClientSharedByManyThreads) {
  auto server = start_server();
  auto shared = client(server->port());
  constexpr int kThreads = 16;
  constexpr int kAdds = 200;
  std::deque<testing::Worker> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) shared->add("total", 1);
      shared->set("done/" + std::to_string(t), "1");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared->add("total", 0), kThreads * kAdds);
}

TEST(TcpStoreTest, ParkedGetDoesNotBlockOtherCallsOnTheSameClient) {
  // The server parks the get; the same connection must keep serving the set
  // that releases it, or this would deadlock until the timeout.
  auto server = start_server();
  auto shared = client(server->port());
  std::string got;
  testing::Worker waiter([&] { got = shared->get("release", 30s); });
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  shared->set("unrelated", "x");
  EXPECT_EQ(shared->get("unrelated", 1s), "x");
  shared->set("release", "go");
  waiter.join();
  EXPECT_EQ(got, "go");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s);  // far below the get's 30 s
}

TEST(TcpStoreTest, WrongSecretIsRefusedAndTheServerKeepsServing) {
  auto server = start_server("right");
  try {
    client(server->port(), "wrong");
    FAIL() << "a client with the wrong secret was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("refused our secret"), std::string::npos) << what;
    EXPECT_NE(what.find("COHORT_SECRET"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(server->port())), std::string::npos) << what;
  }
  EXPECT_EQ(server->refused_count(), 1);
  auto good = client(server->port(), "right");
  good->set("k", "v");
  EXPECT_EQ(good->get("k", 1s), "v");
  EXPECT_EQ(server->refused_count(), 1);
}

TEST(TcpStoreTest, EmptySecretIsRefusedByAServerWithOne) {
  auto server = start_server("right");
  EXPECT_THROW(client(server->port(), ""), ConfigError);
  EXPECT_EQ(server->refused_count(), 1);
}

TEST(TcpStoreTest, EmptySecretOnBothSidesWorks) {
  auto server = start_server("");
  auto c = client(server->port(), "");
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

TEST(TcpStoreTest, StrangerCannotSkipAuthentication) {
  auto server = start_server();
  RawSocket s(server->port());
  read_hello(s);
  wire::Writer w;
  w.u64(1).u8(static_cast<uint8_t>(wire::Op::set)).bytes("stolen").bytes("value");
  ASSERT_TRUE(s.send(w.finish()));
  // One error frame, then the door.
  expect_refusal(s);
  EXPECT_TRUE(s.closed_by_peer());
  EXPECT_EQ(server->refused_count(), 1);
  auto good = client(server->port());
  EXPECT_FALSE(good->check(std::vector<std::string>{"stolen"}));
}

TEST(TcpStoreTest, ReplayedAnswerForAnotherNonceIsRefused) {
  auto server = start_server();
  RawSocket first(server->port());
  const std::string nonce1 = read_hello(first);
  RawSocket second(server->port());
  const std::string nonce2 = read_hello(second);
  EXPECT_NE(nonce1, nonce2);
  ASSERT_TRUE(second.send(greeting(kSecret, nonce1)));
  expect_refusal(second);
  EXPECT_TRUE(second.closed_by_peer());
  EXPECT_EQ(server->refused_count(), 1);
}

TEST(TcpStoreTest, GarbageFromAStrangerDoesNotCrashTheServer) {
  auto server = start_server();
  {
    RawSocket s(server->port());
    ASSERT_TRUE(s.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_TRUE(s.closed_by_peer());
  }
  {
    RawSocket s(server->port());
    std::mt19937 rng(42);
    std::string junk(64 << 10, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    s.send(junk);  // the server may hang up mid-way
    EXPECT_TRUE(s.closed_by_peer());
  }
  {
    // A short malformed handshake frame: length 3, not even an id.
    RawSocket s(server->port());
    read_hello(s);
    ASSERT_TRUE(s.send(std::string("\x03\x00\x00\x00", 4) + "xyz"));
    EXPECT_TRUE(s.closed_by_peer());
  }
  {
    // Half a frame, then gone.
    RawSocket s(server->port());
    ASSERT_TRUE(s.send(std::string("\x10\x00\x00\x00", 4) + "abc"));
  }
  {
    RawSocket s(server->port());  // connects and leaves at once
  }
  EXPECT_GE(server->refused_count(), 3);
  auto good = client(server->port());
  good->set("alive", "yes");
  EXPECT_EQ(good->get("alive", 1s), "yes");
}

TEST(TcpStoreTest, MalformedFramesFromAnAuthenticatedClientDropOnlyThatClient) {
  auto server = start_server();
  auto good = client(server->port());
  good->set("before", "1");
  using Op = wire::Op;
  auto op = [](Op o) { return static_cast<uint8_t>(o); };
  // Payloads, sealed like a real client's so that they reach the request
  // parser.
  const std::vector<wire::Writer> bad_payloads = {
      // unknown operation
      wire::Writer().u64(5).u8(200),
      // the first protocol's authentication request
      wire::Writer().u64(5).u8(1).bytes("x"),
      // set with a key length past the end of the frame
      wire::Writer().u64(5).u8(op(Op::set)).u32(1000).raw("short"),
      // wait claiming four billion keys
      wire::Writer().u64(5).u8(op(Op::wait)).u32(0xffffffffu),
      // trailing bytes after a valid remove
      wire::Writer().u64(5).u8(op(Op::remove)).bytes("k").raw("extra"),
      // shorter than an id
      wire::Writer().raw("abc"),
  };
  for (wire::Writer payload : bad_payloads) {
    RawSession s(server->port());
    raw_authenticate(s, kSecret);
    ASSERT_TRUE(s.socket.send(payload.finish_sealed(*s.to_server)));
    EXPECT_TRUE(s.socket.closed_by_peer()) << "a malformed payload was not rejected";
  }
  // Frames that do not even reach the parser.
  const std::vector<std::string> bad_frames = {
      // a header announcing more than the frame limit
      wire::Writer().u32(wire::kMaxFrameBytes + kAuthMacBytes + 1).finish().substr(4),
      // a body too short to hold a tag
      wire::Writer().raw("0123456789").finish(),
      // a valid request without its tag
      wire::Writer().u64(5).u8(op(Op::set)).bytes("k").bytes("v").finish(),
  };
  for (const auto& frame : bad_frames) {
    RawSession s(server->port());
    raw_authenticate(s, kSecret);
    ASSERT_TRUE(s.socket.send(frame));
    EXPECT_TRUE(s.socket.closed_by_peer()) << "frame of " << frame.size() << " bytes was not rejected";
  }
  EXPECT_EQ(server->refused_count(), 0);  // they knew the secret; dropped, not refused
  EXPECT_EQ(good->get("before", 1s), "1");
  EXPECT_FALSE(good->check(std::vector<std::string>{"k"}));
  good->set("after", "2");
  EXPECT_EQ(good->get("after", 1s), "2");
}

TEST(TcpStoreTest, SealedRequestsFromARawClientAreServed) {
  // The reference for the tests above and below: the frame format as
  // documented in wire.h, spoken without the client library.
  auto server = start_server();
  RawSession s(server->port());
  raw_authenticate(s, kSecret);
  ASSERT_TRUE(s.socket.send(
      wire::Writer().u64(7).u8(static_cast<uint8_t>(wire::Op::set)).bytes("k").bytes("v").finish_sealed(*s.to_server)));
  ASSERT_TRUE(s.socket.send(
      wire::Writer().u64(8).u8(static_cast<uint8_t>(wire::Op::get)).bytes("k").i64(0).finish_sealed(*s.to_server)));
  for (uint64_t id : {7u, 8u}) {
    auto body = s.socket.recv_frame();
    ASSERT_TRUE(body.has_value());
    const auto payload = wire::open_sealed(*s.from_server, *body);
    ASSERT_TRUE(payload.has_value()) << "reply " << id << " fails its tag";
    wire::Reader r(*payload);
    EXPECT_EQ(r.u64(), id);
    EXPECT_EQ(r.u8(), static_cast<uint8_t>(wire::Status::ok));
    if (id == 8) {
      EXPECT_EQ(r.bytes(), "v");
    }
  }
  EXPECT_EQ(client(server->port())->get("k", 1s), "v");
}

TEST(TcpStoreTest, SilentStrangerIsClosedAfterTheAuthTimeout) {
  TcpStoreServer server(
      TcpStoreServerOptions{.host = "127.0.0.1", .port = 0, .secret = kSecret, .auth_timeout = 200ms});
  RawSocket s(server.port());
  read_hello(s);
  EXPECT_TRUE(s.closed_by_peer(20s));
  auto good = client(server.port());
  good->set("k", "v");
}

TEST(TcpStoreTest, PortInUseIsAConfigErrorNamingTheAddress) {
  auto first = start_server();
  try {
    TcpStoreServer second(TcpStoreServerOptions{.host = "127.0.0.1", .port = first->port(), .secret = kSecret});
    FAIL() << "two servers bound port " << first->port();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(first->port())), std::string::npos) << what;
  }
  // The wildcard address conflicts too.
  try {
    TcpStoreServer wildcard(TcpStoreServerOptions{.host = "0.0.0.0", .port = first->port(), .secret = kSecret});
    FAIL() << "two servers bound port " << first->port();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos) << e.what();
  }
}

TEST(TcpStoreTest, UnresolvableBindAddressIsAConfigError) {
  EXPECT_THROW(TcpStoreServer(TcpStoreServerOptions{.host = "no-such-host.invalid", .port = 0, .secret = ""}), ConfigError);
  EXPECT_THROW(TcpStoreServer(TcpStoreServerOptions{.host = "127.0.0.1", .port = 70000, .secret = ""}), ConfigError);
}

TEST(TcpStoreTest, ServerGoneIsPeerLost) {
  auto server = start_server();
  auto c = client(server->port());
  c->set("k", "v");
  std::atomic<bool> parked_lost{false};
  testing::Worker parked([&] {
    try {
      c->get("never-set", 60s);
    } catch (const PeerLostError&) {
      parked_lost = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  server.reset();
  parked.join();
  EXPECT_TRUE(parked_lost.load());
  try {
    c->set("k", "again");
    FAIL() << "set succeeded without a server";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1"), std::string::npos) << e.what();
    EXPECT_EQ(e.host(), "127.0.0.1");
  }
}

int free_port() {
  TcpStoreServer probe(TcpStoreServerOptions{.host = "127.0.0.1", .port = 0, .secret = ""});
  return probe.port();
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  const int port = free_port();
  std::unique_ptr<TcpStore> c;
  std::string error;
  testing::Worker connecting([&] {
    try {
      c = client(port, kSecret, "127.0.0.1", 30s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreServer server(TcpStoreServerOptions{.host = "127.0.0.1", .port = port, .secret = kSecret});
  connecting.join();
  ASSERT_TRUE(c) << error;
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

TEST(TcpStoreTest, NoServerIsATimeout) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    client(port, kSecret, "127.0.0.1", 300ms);
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

TEST(TcpStoreTest, ARefusedConnectionToAStoreThatListenedFirstIsFinal) {
  // cohortrun's store listens before any rank starts: a refusal will not
  // turn into a connection, so the client says why at once instead of
  // retrying for its connect timeout (an hour here).
  const int port = free_port();
  try {
    TcpStore(TcpStoreOptions{
        .host = "127.0.0.1", .port = port, .secret = kSecret, .connect_timeout = 3600s, .server_listening = true});
    FAIL() << "connected to nothing";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot reach the store at 127.0.0.1:" + std::to_string(port) +
                        ": connect: Connection refused: nothing listens there"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("127.0.0.1 is a loopback address, which reaches only the host it is used on"),
              std::string::npos)
        << what;
  }
  // Without server_listening a refusal is retried (the server may be
  // starting): NoServerIsATimeout and ClientRetriesUntilTheServerStarts.
}

TEST(TcpStoreTest, ResolvesToLoopback) {
  EXPECT_TRUE(resolves_to_loopback("127.0.0.1"));
  EXPECT_TRUE(resolves_to_loopback("127.0.1.1"));
  EXPECT_TRUE(resolves_to_loopback("::1"));
  EXPECT_TRUE(resolves_to_loopback("localhost"));
  EXPECT_FALSE(resolves_to_loopback("10.0.0.1"));
  EXPECT_FALSE(resolves_to_loopback("no-such-host.invalid"));
}

TEST(TcpStoreTest, HostnamesResolve) {
  TcpStoreServer server(TcpStoreServerOptions{.host = "0.0.0.0", .port = 0, .secret = kSecret});
  auto c = client(server.port(), kSecret, "localhost");
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

TEST(TcpStoreTest, Ipv6Loopback) {
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{.host = "::1", .port = 0, .secret = kSecret});
  } catch (const ConfigError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  auto c = client(server->port(), kSecret, "::1");
  c->set("k", "v6");
  EXPECT_EQ(c->get("k", 1s), "v6");
}

TEST(TcpStoreTest, UnknownHostIsAConfigError) {
  EXPECT_THROW(client(1234, kSecret, "no-such-host.invalid", 1s), ConfigError);
}

TEST(TcpStoreTest, BadClientOptionsAreConfigErrors) {
  EXPECT_THROW(client(0), ConfigError);
  EXPECT_THROW(client(1234, kSecret, ""), ConfigError);
}

TEST(TcpStoreTest, OversizeValueIsRejectedAndTheConnectionSurvives) {
  auto server = start_server();
  auto c = client(server->port());
  const std::string huge(wire::kMaxFrameBytes + 1, 'x');
  EXPECT_THROW(c->set("huge", huge), ConfigError);
  c->set("small", "ok");
  EXPECT_EQ(c->get("small", 1s), "ok");
}

TEST(TcpStoreTest, NearLimitValueRoundTrips) {
  auto server = start_server();
  auto c = client(server->port());
  const std::string big(wire::kMaxFrameBytes - 1024, 'y');
  c->set("big", big);
  EXPECT_EQ(c->get("big", 30s), big);
}

TEST(TcpStoreTest, ServerShutsDownWithManyParkedClients) {
  auto server = start_server();
  std::vector<std::unique_ptr<TcpStore>> clients;
  std::deque<testing::Worker> threads;
  std::atomic<int> lost{0};
  for (int i = 0; i < 8; ++i) clients.push_back(client(server->port()));
  for (auto& c : clients) {
    threads.emplace_back([&, p = c.get()] {
      try {
        p->wait(std::vector<std::string>{"a", "b"}, 60s);
      } catch (const PeerLostError&) {
        lost.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  server.reset();
  for (auto& t : threads) t.join();
  EXPECT_EQ(lost.load(), 8);
}

// --- Someone between the ranks and the store --------------------------------

// A man in the middle: accepts one client on its own port, connects to the
// store and passes whole frames both ways, letting a test change them on the
// way. From the server, frame 0 is its hello and 1 its handshake answer; from
// the client, frame 0 is its greeting; every later frame is sealed. An edit
// returns the frames to pass on instead of the one it was given.
class Relay {
 public:
  using Edit = std::function<std::vector<std::string>(int index, std::string frame)>;
  static std::vector<std::string> pass(int, std::string frame) { return {std::move(frame)}; }

  Relay(int server_port, Edit to_client, Edit to_server)
      : to_client_(std::move(to_client)), to_server_(std::move(to_server)),
        thread_([this, server_port] { run(server_port); }) {}
  ~Relay() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return listener_.port(); }

 private:
  struct Direction {
    int from = -1, to = -1;
    std::string buffer;
    int frames = 0;
    Edit* edit = nullptr;
  };

  // Moves what `d.from` sent; false at its end of stream.
  static bool pump(Direction& d) {
    char buf[65536];
    const ssize_t n = ::recv(d.from, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
    if (n > 0) d.buffer.append(buf, static_cast<size_t>(n));
    while (d.buffer.size() >= 4) {
      const size_t len = wire::decode_u32(d.buffer.data());
      if (d.buffer.size() < 4 + len) break;
      std::string frame = d.buffer.substr(0, 4 + len);
      d.buffer.erase(0, 4 + len);
      for (const std::string& out : (*d.edit)(d.frames++, std::move(frame)))
        if (::send(d.to, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) return false;
    }
    return true;
  }

  void run(int server_port) {
    std::unique_ptr<RawSocket> client = listener_.accept(10s);
    if (!client) return;
    RawSocket server(server_port);
    Direction down{server.fd(), client->fd(), {}, 0, &to_client_};
    Direction up{client->fd(), server.fd(), {}, 0, &to_server_};
    while (!stop_) {
      pollfd p[2] = {{down.from, POLLIN, 0}, {up.from, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if ((p[0].revents && !pump(down)) || (p[1].revents && !pump(up))) break;
    }
    // Either side hanging up ends both connections.
    ::shutdown(client->fd(), SHUT_RDWR);
    ::shutdown(server.fd(), SHUT_RDWR);
  }

  testing::Listener listener_;
  Edit to_client_, to_server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The frame with one byte of its payload flipped (the last one before the tag).
std::string altered(std::string frame) {
  frame[frame.size() - kAuthMacBytes - 1] ^= 0x01;
  return frame;
}

TEST(TcpStoreTest, RelayThatPassesFramesOnIsTransparent) {
  // The reference for the tampering tests: the relay itself breaks nothing.
  auto server = start_server();
  Relay relay(server->port(), Relay::pass, Relay::pass);
  auto c = client(relay.port());
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
  EXPECT_EQ(c->add("n", 2), 2);
}

TEST(TcpStoreTest, AlteredReplyIsRefusedByTheClient) {
  auto server = start_server();
  Relay relay(
      server->port(),
      [](int i, std::string f) -> std::vector<std::string> { return {i == 3 ? altered(std::move(f)) : std::move(f)}; },
      Relay::pass);
  auto c = client(relay.port());
  c->set("addr/1", "10.0.0.1:1234");  // reply 2 passes
  try {
    c->get("addr/1", 1s);  // reply 3 is altered
    FAIL() << "an altered reply was accepted";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("integrity check"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->check(std::vector<std::string>{"addr/1"}), PeerLostError);  // the connection stays broken
}

TEST(TcpStoreTest, ReplayedReplyIsRefusedByTheClient) {
  auto server = start_server();
  Relay relay(
      server->port(),
      [](int i, std::string f) -> std::vector<std::string> {
        if (i == 2) return {f, f};
        return {std::move(f)};
      },
      Relay::pass);
  auto c = client(relay.port());
  try {
    c->set("k", "v");  // its reply arrives, then again
  } catch (const PeerLostError&) {
    // The replay may be seen before the reply is handed over.
  }
  try {
    c->get("k", 1s);
    FAIL() << "a replayed reply was accepted";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("integrity check"), std::string::npos) << e.what();
  }
}

TEST(TcpStoreTest, AlteredRequestIsRefusedByTheServer) {
  auto server = start_server();
  Relay relay(server->port(), Relay::pass,
              [](int i, std::string f) -> std::vector<std::string> { return {i == 1 ? altered(std::move(f)) : std::move(f)}; });
  auto c = client(relay.port());
  EXPECT_THROW(c->set("addr/1", "10.0.0.1:1234"), PeerLostError);
  auto direct = client(server->port());
  EXPECT_FALSE(direct->check(std::vector<std::string>{"addr/1"})) << "the altered set was applied";
  EXPECT_EQ(server->refused_count(), 0);
}

TEST(TcpStoreTest, ReplayedOrInjectedRequestIsRefusedByTheServer) {
  auto server = start_server();
  // Request 1 is sent twice; the replay must not add twice.
  Relay relay(server->port(), Relay::pass, [](int i, std::string f) -> std::vector<std::string> {
    if (i == 1) return {f, f};
    return {std::move(f)};
  });
  auto c = client(relay.port());
  try {
    c->add("n", 1);  // the reply may or may not come before the server hangs up
  } catch (const PeerLostError&) {
  }
  EXPECT_THROW(c->add("n", 1), PeerLostError);
  auto direct = client(server->port());
  EXPECT_EQ(direct->add("n", 0), 1);
}

// A server without the secret: it greets with a nonce of its own (or
// relays a real server's), reads the client's greeting and answers `ok`
// with `proof(client greeting)` as its proof.
void fake_server(testing::Listener& listener, std::optional<int> real_server_port,
                 std::function<std::string(const std::string& greeting)> proof) {
  std::unique_ptr<RawSocket> c = listener.accept(10s);
  ASSERT_TRUE(c);
  std::optional<RawSocket> real;
  std::string hello;
  if (real_server_port) {
    real.emplace(*real_server_port);
    auto body = real->recv_frame();
    ASSERT_TRUE(body.has_value());
    hello = wire::Writer().raw(*body).finish();
  } else {
    hello = wire::Writer().raw(wire::kHelloMagic).raw(random_bytes(kAuthNonceBytes)).finish();
  }
  ASSERT_TRUE(c->send(hello));
  auto greeting = c->recv_frame();
  ASSERT_TRUE(greeting.has_value());
  ASSERT_EQ(greeting->size(), wire::kHelloMagic.size() + kAuthNonceBytes + kAuthMacBytes);
  ASSERT_TRUE(c->send(wire::Writer().u8(static_cast<uint8_t>(wire::Status::ok)).raw(proof(*greeting)).finish()));
  // The client hangs up on it (and does not keep the socket).
  EXPECT_TRUE(c->closed_by_peer(10s));
}

void expect_impostor_refused(int port) {
  try {
    client(port);
    FAIL() << "the client accepted a server that does not know the secret";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove that it knows the job secret"), std::string::npos)
        << e.what();
  }
}

TEST(TcpStoreTest, ClientRefusesAServerWithoutTheSecret) {
  testing::Listener listener;
  testing::Worker fake([&] {
    fake_server(listener, std::nullopt, [](const std::string&) { return random_bytes(kAuthMacBytes); });
  });
  expect_impostor_refused(listener.port());
  fake.join();
}

TEST(TcpStoreTest, ClientRefusesAServerThatRelaysARealServersChallenge) {
  auto real = start_server();
  for (const bool reflect : {false, true}) {
    testing::Listener listener;
    testing::Worker fake([&] {
      fake_server(listener, real->port(), [&](const std::string& greeting) {
        // The best it has: the client's own proof sent back, or a guess.
        return reflect ? greeting.substr(greeting.size() - kAuthMacBytes) : random_bytes(kAuthMacBytes);
      });
    });
    expect_impostor_refused(listener.port());
    fake.join();
  }
}

// --- Stores without a secret, and strangers ---------------------------------

class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedVariable() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(TcpStoreTest, StoreWithoutASecretServesLoopbackOnlyUnlessAllowed) {
  {
    ScopedVariable unset("COHORT_ALLOW_INSECURE_STORE", nullptr);
    try {
      TcpStoreServer server(TcpStoreServerOptions{.host = "0.0.0.0", .port = 0, .secret = ""});
      FAIL() << "a store without a secret served every interface";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("0.0.0.0"), std::string::npos) << what;
      EXPECT_NE(what.find("COHORT_SECRET"), std::string::npos) << what;
      EXPECT_NE(what.find("COHORT_ALLOW_INSECURE_STORE=1"), std::string::npos) << what;
    }
    for (const char* loopback : {"127.0.0.1", "localhost"}) {
      TcpStoreServer server(TcpStoreServerOptions{.host = loopback, .port = 0, .secret = ""});
      client(server.port(), "")->set("k", "v");
    }
    // With a secret, every interface is fine.
    TcpStoreServer server(TcpStoreServerOptions{.host = "0.0.0.0", .port = 0, .secret = kSecret});
  }
  ScopedVariable allow("COHORT_ALLOW_INSECURE_STORE", "1");
  TcpStoreServer server(TcpStoreServerOptions{.host = "0.0.0.0", .port = 0, .secret = ""});
  auto c = client(server.port(), "");
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

TEST(TcpStoreTest, LoopbackHostsAreRecognisedWithoutResolving) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host : {"0.0.0.0", "10.0.0.1", "::", "128.0.0.1", "node1", "localhost.example.com", ""})
    EXPECT_FALSE(is_loopback_host(host)) << host;
}

TEST(TcpStoreTest, ConnectionsInTheHandshakeAreCapped) {
  TcpStoreServer server(TcpStoreServerOptions{
      .host = "127.0.0.1", .port = 0, .secret = kSecret, .auth_timeout = 60s, .max_handshakes = 2});
  auto first = std::make_unique<RawSocket>(server.port());
  RawSocket second(server.port());
  read_hello(*first);
  read_hello(second);
  // Two strangers hold every handshake slot: a third connection is left in
  // the kernel's backlog, unanswered.
  RawSocket third(server.port());
  EXPECT_FALSE(third.recv_exact(4, 500ms).has_value()) << "a third handshake started beyond the cap";
  first.reset();  // one slot frees up
  const std::string nonce = read_hello(third);
  ASSERT_EQ(nonce.size(), kAuthNonceBytes);
  // A client that finished its handshake no longer counts against the cap.
  ASSERT_TRUE(third.send(greeting(kSecret, nonce)));
  ASSERT_TRUE(third.recv_frame().has_value());
  auto c = client(server.port());
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 1s), "v");
}

}  // namespace
}  // namespace cohort::rendezvous::tcp_store_test
