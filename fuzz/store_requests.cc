// libFuzzer harness: the TCP store server after authentication. Two clients
// complete the handshake with the secret (as TcpStore does), then the input
// drives them: requests that reach the parser because they are sealed like a
// real client's, raw bytes for the frame layer, the clock, and reconnects.
//
// Input: records { u8 kind, u16 little-endian length, `length` bytes }; a
// record cut short ends the input. Bit 0x80 of kind picks the second client
// (connected on first use), kind & 3 the action:
//   0  the bytes are a request payload (wire.h), sealed and sent
//   1  the bytes are sent as they are (lengths, tags, garbage)
//   2  the clock advances `length` milliseconds (parked requests time out)
//   3  the client hangs up and a new one authenticates in its place
// A client the server drops is replaced by a new one.
//
// Properties, besides the sanitizers': every frame the server sends a client
// opens under that connection's server key with the next sequence number and
// holds a request id and a status; close() forgets every connection and its
// parked requests.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cohort/common/logging.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/server_protocol.h"
#include "cohort/rendezvous/wire.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::rendezvous;
using Phase = ServerProtocol::Phase;
using Clock = ServerProtocol::Clock;

namespace {

constexpr std::string_view kSecret = "fuzz-secret";

struct Client {
  ServerProtocol::ConnectionId id = 0;
  std::optional<FrameMac> to_server;
  std::optional<FrameMac> from_server;
  std::string received;  // server bytes not yet parsed into frames
};

// The server's output for `c`, taken off its queue.
std::string take_output(ServerProtocol& protocol, ServerProtocol::ConnectionId id) {
  const std::string out(protocol.output(id));
  protocol.consume(id, out.size());
  return out;
}

// One frame's body off the front of `bytes`, if complete.
std::optional<std::string> next_frame(std::string& bytes) {
  if (bytes.size() < 4) return std::nullopt;
  const uint32_t len = wire::decode_u32(bytes.data());
  if (bytes.size() - 4 < len) return std::nullopt;
  std::string body = bytes.substr(4, len);
  bytes.erase(0, 4 + size_t{len});
  return body;
}

// A connection through the handshake, as TcpStore makes it.
Client connect(ServerProtocol& protocol, Clock::time_point now) {
  Client c;
  c.id = protocol.open("client", now);
  std::string out = take_output(protocol, c.id);
  const auto hello = next_frame(out);
  FUZZ_CHECK(hello && out.empty() && hello->starts_with(wire::kHelloMagic));
  const std::string server_nonce = hello->substr(wire::kHelloMagic.size());
  const std::string client_nonce(kAuthNonceBytes, 'c');
  protocol.receive(c.id,
                   wire::Writer()
                       .raw(wire::kHelloMagic)
                       .raw(client_nonce)
                       .raw(handshake_proof(Prover::client, kSecret, server_nonce, client_nonce))
                       .finish(),
                   now);
  FUZZ_CHECK(protocol.phase(c.id) == Phase::open);
  out = take_output(protocol, c.id);
  const auto answer = next_frame(out);
  FUZZ_CHECK(answer && out.empty() && answer->size() == 1 + kAuthMacBytes);
  FUZZ_CHECK(static_cast<uint8_t>((*answer)[0]) == static_cast<uint8_t>(wire::Status::ok));
  FUZZ_CHECK(verify_handshake_proof(Prover::server, kSecret, server_nonce, client_nonce, answer->substr(1)));
  const SessionKeys keys = session_keys(kSecret, server_nonce, client_nonce);
  c.to_server.emplace(keys.client_to_server);
  c.from_server.emplace(keys.server_to_client);
  return c;
}

// Checks every complete frame the server sent `c`.
void check_replies(ServerProtocol& protocol, Client& c) {
  c.received += take_output(protocol, c.id);
  while (auto body = next_frame(c.received)) {
    const auto payload = wire::open_sealed(*c.from_server, *body);
    FUZZ_CHECK(payload.has_value());
    wire::Reader r(*payload);
    r.u64();
    FUZZ_CHECK(r.u8() <= static_cast<uint8_t>(wire::Status::error));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    cohort::logging::set_threshold(cohort::logging::Level::off);  // drops would flood stderr
    return true;
  }();
  (void)quiet;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  ServerProtocol protocol({.secret = std::string(kSecret), .where = "fuzzed store",
                           .make_nonce = [] { return std::string(kAuthNonceBytes, 's'); }});
  auto now = Clock::time_point{} + std::chrono::hours(1);
  // The second client connects when first used: most inputs need one, and a
  // handshake costs more than the rest of a short input.
  std::optional<Client> clients[2];
  clients[0] = connect(protocol, now);

  while (input.size() >= 3) {
    const uint8_t kind = static_cast<uint8_t>(input[0]);
    const size_t len = static_cast<uint8_t>(input[1]) | size_t{static_cast<uint8_t>(input[2])} << 8;
    input.remove_prefix(3);
    if (len > input.size()) break;
    const std::string_view bytes = input.substr(0, len);
    input.remove_prefix(len);
    std::optional<Client>& slot = clients[kind >> 7];
    if (!slot) slot = connect(protocol, now);
    Client& c = *slot;
    switch (kind & 3) {
      case 0: {
        wire::Writer w;
        w.raw(bytes);
        protocol.receive(c.id, w.finish_sealed(*c.to_server), now);
        break;
      }
      case 1:
        protocol.receive(c.id, bytes, now);
        break;
      case 2:
        now += std::chrono::milliseconds(len);
        protocol.expire(now);
        break;
      case 3:
        protocol.close(c.id);
        c = connect(protocol, now);
        break;
    }
    for (auto& each : clients)
      if (each && protocol.phase(each->id) == Phase::open) check_replies(protocol, *each);
    protocol.take_written();
    for (auto ended : protocol.take_ended()) protocol.close(ended);
    for (auto& each : clients)
      if (each && protocol.phase(each->id) == Phase::ended) each = connect(protocol, now);
  }
  for (auto& each : clients)
    if (each) protocol.close(each->id);
  FUZZ_CHECK(protocol.connections() == 0 && protocol.handshaking() == 0);
  return 0;
}
