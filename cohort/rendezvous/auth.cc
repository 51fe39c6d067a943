#include "cohort/rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>

#include "cohort/common/check.h"

namespace cohort::rendezvous {
namespace {

// Domain separation: the same secret answering some other protocol's
// challenge cannot be replayed here, and vice versa.
constexpr std::string_view kAuthContext{"cohort-store-auth/1\0", 20};

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no OpenSSL error queued";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
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

std::string auth_response(std::string_view secret, std::string_view nonce) {
  std::string message;
  message.reserve(kAuthContext.size() + nonce.size());
  message.append(kAuthContext);
  message.append(nonce);
  return hmac_sha256(secret, message);
}

bool auth_verify(std::string_view secret, std::string_view nonce, std::string_view response) {
  const std::string expected = auth_response(secret, nonce);
  if (response.size() != expected.size()) return false;
  return CRYPTO_memcmp(expected.data(), response.data(), expected.size()) == 0;
}

}  // namespace cohort::rendezvous
