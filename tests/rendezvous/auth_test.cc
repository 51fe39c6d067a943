// The HMAC challenge-response primitives and secret generation.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "cohort/rendezvous/auth.h"

namespace cohort::rendezvous {
namespace {

TEST(AuthTest, HmacSha256MatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1: 20 bytes of 0x0b, "Hi There".
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(AuthTest, Sha256MatchesKnownDigest) {
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTest, EmptyKeyAndMessageWork) {
  EXPECT_EQ(to_hex(hmac_sha256("", "")),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(AuthTest, GeneratedSecretsAreHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string s = generate_secret();
    ASSERT_EQ(s.size(), 64u);
    for (char c : s) ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << s;
    EXPECT_TRUE(seen.insert(s).second) << "secret repeated: " << s;
  }
}

TEST(AuthTest, ResponseVerifiesOnlyForTheSameSecretAndNonce) {
  const std::string nonce = random_bytes(kAuthNonceBytes);
  ASSERT_EQ(nonce.size(), kAuthNonceBytes);
  const std::string answer = auth_response("secret", nonce);
  EXPECT_EQ(answer.size(), kAuthMacBytes);
  EXPECT_TRUE(auth_verify("secret", nonce, answer));
  EXPECT_FALSE(auth_verify("Secret", nonce, answer));
  EXPECT_FALSE(auth_verify("secret", random_bytes(kAuthNonceBytes), answer));
  EXPECT_FALSE(auth_verify("secret", nonce, answer.substr(0, 31)));
  EXPECT_FALSE(auth_verify("secret", nonce, answer + "x"));
  EXPECT_FALSE(auth_verify("secret", nonce, ""));
  std::string flipped = answer;
  flipped[17] ^= 1;
  EXPECT_FALSE(auth_verify("secret", nonce, flipped));
  // The answer is not the bare HMAC of the nonce (it is bound to the protocol).
  EXPECT_NE(answer, hmac_sha256("secret", nonce));
}

}  // namespace
}  // namespace cohort::rendezvous
