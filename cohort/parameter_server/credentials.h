// Credentials: how a parameter server knows that a peer holds the job secret.
//
// Over TCP, ZeroMQ's CURVE mechanism (Curve25519 keys, every message
// encrypted and authenticated): the server's and the client's keypairs are
// both derived from the job secret by HMAC-SHA256, so only a holder of the
// secret can complete the handshake with a server (it must know the
// server's public key) and the server's ZAP handler admits only the derived
// client key. Over ipc:// (same host), ZeroMQ's PLAIN mechanism with a
// password derived from the secret by HMAC (the secret itself never crosses
// the socket), checked by the same ZAP handler, on a socket file inside a
// 0700 directory; bench/README.md ("The transport") measures why (CURVE's encryption
// costs more than the copy on one host).
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include <zmq.hpp>

namespace cohort::ps {

struct CurveKeys {
  std::string server_public, server_secret;  // Z85 text, 40 characters each
  std::string client_public, client_secret;
};

CurveKeys derive_curve_keys(std::string_view job_secret);
std::string derive_ipc_password(std::string_view job_secret);
inline constexpr const char* kIpcUser = "cohort-ps";

// Configures a server socket (before bind) for `mechanism` "curve" or "plain".
void make_curve_server(zmq::socket_t& socket, const CurveKeys& keys);
void make_plain_server(zmq::socket_t& socket);
// Configures a client socket (before connect).
void make_curve_client(zmq::socket_t& socket, const CurveKeys& keys);
void make_plain_client(zmq::socket_t& socket, std::string_view job_secret);

// The ZAP handler of one ZeroMQ context: binds inproc://zeromq.zap.01 (so
// create it before any server socket of the context binds) and answers the
// requests ZeroMQ sends it for every new connection. The owner polls
// socket() and calls handle() when it is readable.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::string_view job_secret);
  zmq::socket_t& socket() { return socket_; }
  // Answers one pending request (no-op when none): 200 for the derived CURVE
  // client key or the derived PLAIN password, 400 otherwise.
  void handle();
  int refused() const { return refused_.load(); }
  int admitted() const { return admitted_.load(); }

 private:
  zmq::socket_t socket_;
  std::string client_public_raw_;  // 32 bytes
  std::string ipc_password_;
  std::atomic<int> refused_{0}, admitted_{0};
};

}  // namespace cohort::ps
