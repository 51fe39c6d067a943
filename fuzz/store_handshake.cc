// libFuzzer harness: the TCP store server before authentication. A stranger
// who does not know the secret sends arbitrary bytes to ServerProtocol (the
// server's frame handling without sockets).
//
// Input: byte 0 sets the size of the chunks the rest is delivered in (1..255,
// or 0 for all at once), so that frames split anywhere are parsed too; the
// clock advances 250 ms after each chunk, so the handshake and drain
// deadlines pass within long inputs.
//
// Properties, besides the sanitizers': the stranger is never served (the
// secret is drawn at random per process, so no input can prove it); the
// server sends its hello and at most one refusal frame; close() forgets the
// connection.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/common/logging.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/server_protocol.h"
#include "cohort/rendezvous/wire.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::rendezvous;
using Phase = ServerProtocol::Phase;

namespace {

// Splits `bytes` into frame bodies; false when a frame is incomplete.
bool frames(std::string_view bytes, std::vector<std::string_view>& out) {
  while (!bytes.empty()) {
    if (bytes.size() < 4) return false;
    const uint32_t len = wire::decode_u32(bytes.data());
    if (bytes.size() - 4 < len) return false;
    out.push_back(bytes.substr(4, len));
    bytes.remove_prefix(4 + size_t{len});
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string secret = [] {
    cohort::logging::set_threshold(cohort::logging::Level::off);  // refusals would flood stderr
    return to_hex(random_bytes(32));
  }();
  if (size == 0) return 0;
  const size_t chunk = data[0] == 0 ? size : data[0];
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  ServerProtocol protocol({.secret = secret, .where = "fuzzed store"});
  auto now = ServerProtocol::Clock::time_point{} + std::chrono::hours(1);
  const auto id = protocol.open("stranger", now);
  std::string sent;
  auto collect = [&] {
    const std::string_view out = protocol.output(id);
    sent.append(out);
    protocol.consume(id, out.size());
    protocol.take_written();
  };
  collect();
  while (!input.empty()) {
    const size_t n = std::min(chunk, input.size());
    protocol.receive(id, input.substr(0, n), now);
    input.remove_prefix(n);
    FUZZ_CHECK(protocol.phase(id) != Phase::open);
    collect();
    now += std::chrono::milliseconds(250);
    protocol.expire(now);
  }

  std::vector<std::string_view> bodies;
  FUZZ_CHECK(frames(sent, bodies));
  FUZZ_CHECK(!bodies.empty() && bodies.size() <= 2);
  FUZZ_CHECK(bodies[0].size() == wire::kHelloMagic.size() + kAuthNonceBytes && bodies[0].starts_with(wire::kHelloMagic));
  if (bodies.size() == 2) {
    wire::Reader r(bodies[1]);
    FUZZ_CHECK(r.u8() == static_cast<uint8_t>(wire::Status::error));
    FUZZ_CHECK(!r.bytes().empty());
    r.done();
    FUZZ_CHECK(protocol.refused() == 1);
  }
  for (auto ended : protocol.take_ended()) protocol.close(ended);
  protocol.close(id);
  FUZZ_CHECK(protocol.connections() == 0 && protocol.handshaking() == 0);
  return 0;
}
