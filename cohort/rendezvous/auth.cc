#include "cohort/rendezvous/auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <climits>

#include "cohort/common/check.h"

namespace cohort::rendezvous {
namespace {

// Domain separation: a proof or key of one role or protocol version is of no
// use as another's.
constexpr std::string_view kClientProof{"cohort-store-client/2\0", 22};
constexpr std::string_view kServerProof{"cohort-store-server/2\0", 22};
constexpr std::string_view kSessionKey{"cohort-store-session/2\0", 23};
constexpr std::string_view kClientToServer = "client-to-server";
constexpr std::string_view kServerToClient = "server-to-client";

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no OpenSSL error queued";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string over_nonces(std::string_view context, std::string_view secret, std::string_view server_nonce,
                        std::string_view client_nonce) {
  std::string message;
  message.reserve(context.size() + server_nonce.size() + client_nonce.size());
  message.append(context).append(server_nonce).append(client_nonce);
  return hmac_sha256(secret, message);
}

bool same(std::string_view expected, std::string_view given) {
  return given.size() == expected.size() && CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

// The HMAC implementation, fetched once per process.
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = [] {
    EVP_MAC* m = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    COHORT_CHECK(m != nullptr) << "OpenSSL has no HMAC: " << openssl_error();
    return m;
  }();
  return mac;
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  COHORT_CHECK(n <= INT_MAX) << "random_bytes(" << n << ") is too large";
  if (n == 0) return out;
  COHORT_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1)
      << "RAND_bytes failed: " << openssl_error();
  return out;
}

std::string generate_secret() { return to_hex(random_bytes(32)); }

std::string hmac_sha256(std::string_view key, std::string_view message) {
  // HMAC() (the one-shot) is not deprecated in OpenSSL 3.0, unlike HMAC_CTX.
  // It wants a non-null key pointer even for an empty key.
  static const unsigned char kEmpty = 0;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  COHORT_CHECK(key.size() <= INT_MAX) << "HMAC key of " << key.size() << " bytes";
  const unsigned char* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  const unsigned char* m =
      message.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(message.data());
  COHORT_CHECK(HMAC(EVP_sha256(), k, static_cast<int>(key.size()), m, message.size(), out, &out_len) !=
               nullptr)
      << "HMAC-SHA256 failed: " << openssl_error();
  COHORT_CHECK_EQ(out_len, kAuthMacBytes) << "HMAC-SHA256 length";
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

std::string sha256(std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  COHORT_CHECK(EVP_Digest(data.data(), data.size(), out, &out_len, EVP_sha256(), nullptr) == 1)
      << "SHA-256 failed: " << openssl_error();
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string handshake_proof(Prover prover, std::string_view secret, std::string_view server_nonce,
                            std::string_view client_nonce) {
  return over_nonces(prover == Prover::client ? kClientProof : kServerProof, secret, server_nonce, client_nonce);
}

bool verify_handshake_proof(Prover prover, std::string_view secret, std::string_view server_nonce,
                            std::string_view client_nonce, std::string_view proof) {
  return same(handshake_proof(prover, secret, server_nonce, client_nonce), proof);
}

SessionKeys session_keys(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  const std::string session = over_nonces(kSessionKey, secret, server_nonce, client_nonce);
  return {hmac_sha256(session, kClientToServer), hmac_sha256(session, kServerToClient)};
}

// ---------------------------------------------------------------------------
// FrameMac
// ---------------------------------------------------------------------------

struct FrameMac::Keyed {
  EVP_MAC_CTX* ctx = nullptr;  // keyed once
  ~Keyed() { EVP_MAC_CTX_free(ctx); }
};

FrameMac::FrameMac(std::string_view key) : keyed_(std::make_unique<Keyed>()) {
  COHORT_CHECK(!key.empty()) << "a frame key must not be empty";
  keyed_->ctx = EVP_MAC_CTX_new(hmac_algorithm());
  COHORT_CHECK(keyed_->ctx != nullptr) << "EVP_MAC_CTX_new: " << openssl_error();
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  COHORT_CHECK(EVP_MAC_init(keyed_->ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                            params) == 1)
      << "EVP_MAC_init: " << openssl_error();
}

FrameMac::~FrameMac() = default;
FrameMac::FrameMac(FrameMac&&) noexcept = default;
FrameMac& FrameMac::operator=(FrameMac&&) noexcept = default;

std::string FrameMac::tag_for(uint64_t sequence, std::string_view payload) {
  // Re-initialising without a key keeps the one set in the constructor, so
  // a frame costs no allocation and no key schedule.
  EVP_MAC_CTX* ctx = keyed_->ctx;
  unsigned char counter[8];
  for (int i = 0; i < 8; ++i) counter[i] = static_cast<unsigned char>(sequence >> (8 * i));
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t out_len = 0;
  COHORT_CHECK(EVP_MAC_init(ctx, nullptr, 0, nullptr) == 1 && EVP_MAC_update(ctx, counter, sizeof counter) == 1 &&
               EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) == 1 &&
               EVP_MAC_final(ctx, out, &out_len, sizeof out) == 1)
      << "HMAC-SHA256 of a frame failed: " << openssl_error();
  COHORT_CHECK_EQ(out_len, kAuthMacBytes) << "HMAC-SHA256 length";
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

std::string FrameMac::seal(std::string_view payload) { return tag_for(sequence_++, payload); }

bool FrameMac::open(std::string_view payload, std::string_view tag) {
  if (!same(tag_for(sequence_, payload), tag)) return false;
  ++sequence_;
  return true;
}

}  // namespace cohort::rendezvous
