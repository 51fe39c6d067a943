// TcpStore and TcpStoreServer over real sockets: concurrency, the secret,
// hostile peers, port conflicts, lost servers and connection retries.
#include <atomic>
#include <chrono>
#include <deque>
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

namespace cohort::rendezvous {
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

// Authenticates a raw socket the way TcpStore does.
void raw_authenticate(RawSocket& s, const std::string& secret) {
  const std::string nonce = read_hello(s);
  wire::Writer w;
  w.u64(0).u8(static_cast<uint8_t>(wire::Op::auth)).bytes(auth_response(secret, nonce));
  ASSERT_TRUE(s.send(w.finish()));
  auto header = s.recv_exact(4);
  ASSERT_TRUE(header.has_value());
  auto payload = s.recv_exact(wire::decode_u32(header->data()));
  ASSERT_TRUE(payload.has_value());
  wire::Reader r(*payload);
  EXPECT_EQ(r.u64(), 0u);
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(wire::Status::ok));
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
  // One error reply, then the door.
  auto header = s.recv_exact(4);
  ASSERT_TRUE(header.has_value());
  auto payload = s.recv_exact(wire::decode_u32(header->data()));
  ASSERT_TRUE(payload.has_value());
  wire::Reader r(*payload);
  r.u64();
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(wire::Status::error));
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
  wire::Writer w;
  w.u64(0).u8(static_cast<uint8_t>(wire::Op::auth)).bytes(auth_response(kSecret, nonce1));
  ASSERT_TRUE(second.send(w.finish()));
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
  const std::vector<std::string> bad_frames = {
      // unknown operation
      wire::Writer().u64(5).u8(200).finish(),
      // set with a key length past the end of the frame
      wire::Writer().u64(5).u8(static_cast<uint8_t>(wire::Op::set)).u32(1000).raw("short").finish(),
      // wait claiming four billion keys
      wire::Writer().u64(5).u8(static_cast<uint8_t>(wire::Op::wait)).u32(0xffffffffu).finish(),
      // trailing bytes after a valid remove
      wire::Writer().u64(5).u8(static_cast<uint8_t>(wire::Op::remove)).bytes("k").raw("extra").finish(),
      // a second authentication
      wire::Writer().u64(5).u8(static_cast<uint8_t>(wire::Op::auth)).bytes("x").finish(),
      // a header announcing more than the frame limit
      wire::Writer().u32(wire::kMaxFrameBytes + 1).finish().substr(4),
  };
  for (const auto& frame : bad_frames) {
    RawSocket s(server->port());
    raw_authenticate(s, kSecret);
    ASSERT_TRUE(s.send(frame));
    EXPECT_TRUE(s.closed_by_peer()) << "frame of " << frame.size() << " bytes was not rejected";
  }
  EXPECT_EQ(server->refused_count(), 0);  // they knew the secret; dropped, not refused
  EXPECT_EQ(good->get("before", 1s), "1");
  good->set("after", "2");
  EXPECT_EQ(good->get("after", 1s), "2");
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
  EXPECT_THROW(TcpStoreServer(TcpStoreServerOptions{.host = "0.0.0.0", .port = first->port(), .secret = ""}), ConfigError);
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

}  // namespace
}  // namespace cohort::rendezvous
