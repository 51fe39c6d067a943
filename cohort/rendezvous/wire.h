// The TCP store's wire format (internal to cohort_rendezvous, its tests and
// fuzzers).
//
// Every message is a frame: a little-endian u32 length, then the body.
// Integers are little-endian; `bytes` is a u32 length and the bytes.
//
// The handshake (auth.h says what the nonces and proofs are):
//   server hello     kHelloMagic, server nonce (kAuthNonceBytes)
//   client hello     kHelloMagic, client nonce (kAuthNonceBytes),
//                    client proof (kAuthMacBytes)
//   server answer    u8 Status ok, server proof (kAuthMacBytes)
//                    | u8 Status error, bytes message (then the server hangs up)
// Handshake frames are at most kMaxHandshakeFrameBytes long.
//
// After it, every frame's body is a payload followed by its tag
// (kAuthMacBytes, FrameMac of the sender's direction), and the length counts
// both. Payloads:
//   request          u64 id, u8 Op, fields
//     set            bytes key, bytes value
//     get            bytes key, i64 timeout_ms     (parked until set or timeout)
//     add            bytes key, i64 delta
//     compare_set    bytes key, bytes expected, bytes desired
//     wait           u32 n, n x bytes key, i64 timeout_ms
//     check          u32 n, n x bytes key
//     remove         bytes key
//   response         u64 id (of the request), u8 Status, fields
//     ok             get/compare_set: bytes; add: i64; check/remove: u8 bool
//     timeout        wait: u32 n, n x bytes missing key
//     error          bytes message
// Responses to parked requests may overtake later ones: match them by id.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cohort/rendezvous/auth.h"

namespace cohort::rendezvous::wire {

inline constexpr std::string_view kHelloMagic = "cohort-store/2";
// Largest payload (tag excluded) accepted from an authenticated peer, and
// largest frame from one that has not authenticated yet (a stranger must not
// make the server allocate much).
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
inline constexpr uint32_t kMaxHandshakeFrameBytes = 1024;

// 1 was the first protocol's authentication request; it is no operation now.
enum class Op : uint8_t { set = 2, get, add, compare_set, wait, check, remove };
enum class Status : uint8_t { ok = 0, timeout = 1, error = 2 };

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Builds one frame; finish() fills in the length.
class Writer {
 public:
  Writer() { buf_.assign(4, '\0'); }
  Writer& u8(uint8_t v) {
    buf_ += static_cast<char>(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Writer& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& raw(std::string_view s) {
    buf_.append(s);
    return *this;
  }
  Writer& bytes(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    return raw(s);
  }
  size_t payload_size() const { return buf_.size() - 4; }
  std::string finish() {  // leaves the writer empty
    const auto n = static_cast<uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return std::move(buf_);
  }
  // The frame of an authenticated connection: the payload, then its tag
  // under `mac` (which counts the frame).
  std::string finish_sealed(FrameMac& mac) {
    buf_ += mac.seal(std::string_view(buf_).substr(4));
    return finish();
  }

 private:
  std::string buf_;
};

inline uint32_t decode_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// The payload of a sealed frame's body, or nullopt when the body is too
// short for a tag or the tag is not `mac`'s next one.
inline std::optional<std::string_view> open_sealed(FrameMac& mac, std::string_view body) {
  if (body.size() < kAuthMacBytes) return std::nullopt;
  const std::string_view payload = body.substr(0, body.size() - kAuthMacBytes);
  if (!mac.open(payload, body.substr(payload.size()))) return std::nullopt;
  return payload;
}

// Reads one payload; every read is bounds-checked and throws ProtocolError.
class Reader {
 public:
  explicit Reader(std::string_view payload) : rest_(payload) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() { return decode_u32(take(4).data()); }
  uint64_t u64() {
    const auto s = take(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string_view raw(size_t n) { return take(n); }
  std::string bytes() {
    const uint32_t n = u32();
    return std::string(take(n));
  }
  // A count of items each at least `min_item_bytes` long, checked against
  // what is left, so a forged count cannot make us reserve gigabytes.
  uint32_t count(size_t min_item_bytes) {
    const uint32_t n = u32();
    if (static_cast<uint64_t>(n) * min_item_bytes > rest_.size())
      throw ProtocolError("item count " + std::to_string(n) + " exceeds the frame");
    return n;
  }
  void done() const {
    if (!rest_.empty())
      throw ProtocolError(std::to_string(rest_.size()) + " trailing bytes in frame");
  }

 private:
  std::string_view take(size_t n) {
    if (n > rest_.size())
      throw ProtocolError("frame truncated: wanted " + std::to_string(n) + " bytes, " +
                          std::to_string(rest_.size()) + " left");
    auto s = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return s;
  }
  std::string_view rest_;
};

}  // namespace cohort::rendezvous::wire
