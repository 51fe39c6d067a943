// Authentication of TCP store clients: HMAC-SHA256 challenge-response over
// the job secret (COHORT_SECRET), with OpenSSL's libcrypto.
//
// The server sends a fresh random nonce; the client answers
// HMAC-SHA256(secret, "cohort-store-auth/1" NUL nonce); the server recomputes
// it and compares in constant time. The secret never crosses the wire and an
// answer is useless for any other nonce.
#pragma once

#include <cstddef>
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

// The client's answer to `nonce` (kAuthMacBytes bytes).
std::string auth_response(std::string_view secret, std::string_view nonce);

// Whether `response` is the right answer to `nonce`, compared in constant
// time (CRYPTO_memcmp). A response of the wrong length is simply wrong.
bool auth_verify(std::string_view secret, std::string_view nonce, std::string_view response);

// Raw HMAC-SHA256 and SHA-256 (binary, 32 bytes), and lowercase hex.
std::string hmac_sha256(std::string_view key, std::string_view message);
std::string sha256(std::string_view data);
std::string to_hex(std::string_view bytes);

}  // namespace cohort::rendezvous
