// The handshake proofs, session keys and frame tags of the TCP store, and
// secret generation, checked against HMAC-SHA256 computed independently.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "cohort/rendezvous/auth.h"

namespace cohort::rendezvous::auth_test {
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

TEST(AuthTest, ProofsVerifyOnlyForTheSameRoleSecretAndNonces) {
  const std::string ns = random_bytes(kAuthNonceBytes), nc = random_bytes(kAuthNonceBytes);
  ASSERT_EQ(ns.size(), kAuthNonceBytes);
  const std::string client = handshake_proof(Prover::client, "secret", ns, nc);
  const std::string server = handshake_proof(Prover::server, "secret", ns, nc);
  EXPECT_EQ(client.size(), kAuthMacBytes);
  EXPECT_TRUE(verify_handshake_proof(Prover::client, "secret", ns, nc, client));
  EXPECT_TRUE(verify_handshake_proof(Prover::server, "secret", ns, nc, server));
  // The client's proof is no server proof: a relay cannot answer with it.
  EXPECT_NE(client, server);
  EXPECT_FALSE(verify_handshake_proof(Prover::server, "secret", ns, nc, client));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "Secret", ns, nc, client));
  // Bound to both nonces, in their places.
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", random_bytes(kAuthNonceBytes), nc, client));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", ns, random_bytes(kAuthNonceBytes), client));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", nc, ns, client));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", ns, nc, client.substr(0, 31)));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", ns, nc, client + "x"));
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", ns, nc, ""));
  std::string flipped = client;
  flipped[17] ^= 1;
  EXPECT_FALSE(verify_handshake_proof(Prover::client, "secret", ns, nc, flipped));
  // Independent reference: the HMAC of the labelled concatenation.
  EXPECT_EQ(client, hmac_sha256("secret", std::string("cohort-store-client/2\0", 22) + ns + nc));
  EXPECT_EQ(server, hmac_sha256("secret", std::string("cohort-store-server/2\0", 22) + ns + nc));
}

TEST(AuthTest, SessionKeysDifferPerDirectionAndConnection) {
  const std::string ns = random_bytes(kAuthNonceBytes), nc = random_bytes(kAuthNonceBytes);
  const SessionKeys k = session_keys("secret", ns, nc);
  EXPECT_EQ(k.client_to_server.size(), kAuthMacBytes);
  EXPECT_NE(k.client_to_server, k.server_to_client);
  EXPECT_EQ(k.client_to_server, session_keys("secret", ns, nc).client_to_server);
  EXPECT_NE(k.client_to_server, session_keys("secret", ns, random_bytes(kAuthNonceBytes)).client_to_server);
  EXPECT_NE(k.client_to_server, session_keys("other", ns, nc).client_to_server);
  const std::string session = hmac_sha256("secret", std::string("cohort-store-session/2\0", 23) + ns + nc);
  EXPECT_EQ(k.client_to_server, hmac_sha256(session, "client-to-server"));
  EXPECT_EQ(k.server_to_client, hmac_sha256(session, "server-to-client"));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

TEST(AuthTest, FrameTagsCountFramesAndMatchTheHmacOfSequenceAndPayload) {
  const std::string key = random_bytes(kAuthMacBytes);
  FrameMac sender(key), receiver(key);
  const std::string t0 = sender.seal("first"), t1 = sender.seal("second");
  EXPECT_EQ(t0, hmac_sha256(key, le64(0) + "first"));
  EXPECT_EQ(t1, hmac_sha256(key, le64(1) + "second"));
  // Replayed, reordered, altered or from another key: refused, and not counted.
  EXPECT_FALSE(receiver.open("second", t1));
  EXPECT_FALSE(receiver.open("firsT", t0));
  EXPECT_FALSE(FrameMac(random_bytes(kAuthMacBytes)).open("first", t0));
  EXPECT_EQ(receiver.frames(), 0u);
  EXPECT_TRUE(receiver.open("first", t0));
  EXPECT_FALSE(receiver.open("first", t0));
  EXPECT_TRUE(receiver.open("second", t1));
  EXPECT_EQ(receiver.frames(), 2u);
  EXPECT_EQ(sender.frames(), 2u);
}

}  // namespace
}  // namespace cohort::rendezvous::auth_test
