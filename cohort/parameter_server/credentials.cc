#include "cohort/parameter_server/credentials.h"

#include <zmq.h>

#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/rendezvous/auth.h"

namespace cohort::ps {

namespace {

std::string z85(std::string_view raw) {
  char text[41] = {};
  COHORT_CHECK(zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(raw.data()), raw.size()) != nullptr);
  return text;
}

std::string public_of(const std::string& secret_z85) {
  char pub[41] = {};
  COHORT_CHECK(zmq_curve_public(pub, secret_z85.c_str()) == 0) << "zmq_curve_public: " << zmq_strerror(zmq_errno());
  return pub;
}

// A comparison whose time does not depend on where the texts differ.
bool equal_in_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

CurveKeys derive_curve_keys(std::string_view job_secret) {
  COHORT_CHECK(zmq_has("curve")) << "this libzmq was built without CURVE (libsodium); install Debian's libzmq5";
  CurveKeys keys;
  // Any 32 bytes are a Curve25519 secret key (the scalar is clamped when
  // used), so an HMAC output serves directly.
  keys.server_secret = z85(rendezvous::hmac_sha256(job_secret, "cohort-ps/curve-server/1"));
  keys.client_secret = z85(rendezvous::hmac_sha256(job_secret, "cohort-ps/curve-client/1"));
  keys.server_public = public_of(keys.server_secret);
  keys.client_public = public_of(keys.client_secret);
  return keys;
}

std::string derive_ipc_password(std::string_view job_secret) {
  return rendezvous::to_hex(rendezvous::hmac_sha256(job_secret, "cohort-ps/ipc-password/1"));
}

void make_curve_server(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.server_secret);
  socket.set(zmq::sockopt::zap_domain, "cohort-ps");
}

void make_plain_server(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::plain_server, 1);
  socket.set(zmq::sockopt::zap_domain, "cohort-ps");
}

void make_curve_client(zmq::socket_t& socket, const CurveKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
  socket.set(zmq::sockopt::curve_publickey, keys.client_public);
  socket.set(zmq::sockopt::curve_secretkey, keys.client_secret);
}

void make_plain_client(zmq::socket_t& socket, std::string_view job_secret) {
  socket.set(zmq::sockopt::plain_username, kIpcUser);
  socket.set(zmq::sockopt::plain_password, derive_ipc_password(job_secret));
}

ZapHandler::ZapHandler(zmq::context_t& context, std::string_view job_secret)
    : socket_(context, zmq::socket_type::rep), ipc_password_(derive_ipc_password(job_secret)) {
  std::vector<uint8_t> raw(32);
  const std::string client_public = derive_curve_keys(job_secret).client_public;
  COHORT_CHECK(zmq_z85_decode(raw.data(), client_public.c_str()) != nullptr);
  client_public_raw_.assign(raw.begin(), raw.end());
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

void ZapHandler::handle() {
  // ZAP 1.0 request: version, request id, domain, address, routing id,
  // mechanism, then the mechanism's credentials.
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t part;
    if (!socket_.recv(part, frames.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none)) return;
    const bool more = part.more();
    frames.push_back(std::move(part));
    if (!more) break;
  }
  if (frames.size() < 6) return;  // not a ZAP request; REP needs no reply for nothing
  const std::string mechanism = frames[5].to_string();
  const std::string address = frames[3].to_string();
  bool ok = false;
  if (mechanism == "CURVE" && frames.size() >= 7)
    ok = equal_in_constant_time(frames[6].to_string(), client_public_raw_);
  else if (mechanism == "PLAIN" && frames.size() >= 8)
    ok = frames[6].to_string() == kIpcUser && equal_in_constant_time(frames[7].to_string(), ipc_password_);
  if (ok)
    ++admitted_;
  else {
    ++refused_;
    COHORT_LOG(warn) << "parameter server: refused a " << mechanism << " connection from "
                     << (address.empty() ? "a local socket" : address) << " (credentials not derived from the job secret)";
  }
  const std::string status = ok ? "200" : "400";
  const std::string text = ok ? "OK" : "credentials not derived from the job secret";
  socket_.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
  socket_.send(frames[1], zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(std::string(ok ? "worker" : "")), zmq::send_flags::sndmore);
  socket_.send(zmq::str_buffer(""), zmq::send_flags::none);
}

}  // namespace cohort::ps
