// Mutual authentication of the TCP store and the keys that protect its
// frames: HMAC-SHA256 over the job secret (COHORT_SECRET), with OpenSSL's
// libcrypto.
//
// The handshake (wire.h has the frames):
//   server -> client  a fresh random server nonce Ns
//   client -> server  a fresh random client nonce Nc and its proof
//                     HMAC(secret, "cohort-store-client/2" NUL Ns Nc)
//   server -> client  after checking it, the server's own proof
//                     HMAC(secret, "cohort-store-server/2" NUL Ns Nc)
// Each side proves the secret over both nonces, so neither answer is of use
// in any other connection: a fake server cannot get a client to accept it,
// and one that relays a real server's nonce can pass the client's proof on
// but cannot answer with the server's. The secret never crosses the wire.
//
// Both sides then derive the session key
//   K = HMAC(secret, "cohort-store-session/2" NUL Ns Nc)
// and one key per direction from it (session_keys()); every later frame
// carries a tag under its direction's key over a sequence number (FrameMac),
// so a frame cannot be forged, altered, replayed, reordered, dropped without
// the next one failing, or reflected back to its sender.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cohort::rendezvous {

inline constexpr size_t kAuthNonceBytes = 32;
inline constexpr size_t kAuthMacBytes = 32;  // SHA-256

// A new job secret: 32 bytes from the CSPRNG as 64 lowercase hex digits.
// cohortrun calls it once per job and passes it to every rank as COHORT_SECRET.
std::string generate_secret();

// `n` bytes from OpenSSL's CSPRNG (RAND_bytes); Error when it fails.
std::string random_bytes(size_t n);

// Who proves the secret in a handshake proof.
enum class Prover { client, server };

// The proof of `prover` for the nonces of one connection (kAuthMacBytes).
std::string handshake_proof(Prover prover, std::string_view secret, std::string_view server_nonce,
                            std::string_view client_nonce);

// Whether `proof` is the right one, compared in constant time
// (CRYPTO_memcmp). A proof of the wrong length is simply wrong.
bool verify_handshake_proof(Prover prover, std::string_view secret, std::string_view server_nonce,
                            std::string_view client_nonce, std::string_view proof);

// The per-direction keys of one connection (kAuthMacBytes each).
struct SessionKeys {
  std::string client_to_server;
  std::string server_to_client;
};
SessionKeys session_keys(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce);

// One direction of an authenticated connection. The n-th frame (from 0) of
// the direction carries the tag HMAC-SHA256(key, u64le n || payload); the
// sender and the receiver each count. Not thread-safe: one sender, one
// receiver.
class FrameMac {
 public:
  explicit FrameMac(std::string_view key);
  ~FrameMac();
  FrameMac(FrameMac&&) noexcept;
  FrameMac& operator=(FrameMac&&) noexcept;

  // The tag of the next frame (kAuthMacBytes); counts it.
  std::string seal(std::string_view payload);
  // Whether `tag` is the next frame's tag for `payload`; counts the frame
  // only when it is (a refused frame ends the connection anyway).
  bool open(std::string_view payload, std::string_view tag);

  uint64_t frames() const { return sequence_; }

 private:
  std::string tag_for(uint64_t sequence, std::string_view payload);

  struct Keyed;  // an HMAC context keyed once, re-initialised per frame
  std::unique_ptr<Keyed> keyed_;
  uint64_t sequence_ = 0;
};

// Raw HMAC-SHA256 and SHA-256 (binary, 32 bytes), and lowercase hex.
std::string hmac_sha256(std::string_view key, std::string_view message);
std::string sha256(std::string_view data);
std::string to_hex(std::string_view bytes);

}  // namespace cohort::rendezvous
