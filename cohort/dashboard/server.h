// DashboardServer: the dashboard's HTTP server (Debian's cpp-httplib), on a
// thread pool of its own:
//
//   GET /              the page (page.html; assets.h)
//   GET /chart.min.js  Chart.js (embedded; nothing comes from the network)
//   GET /api/status    the Status JSON (status.h, docs/dashboard.md)
//
// Access (docs/security.md): bound to a loopback address (the default,
// 127.0.0.1), it answers requests whose Host header names a loopback
// address (so a web page elsewhere cannot read it through DNS rebinding)
// and asks for no token: only this machine reaches it. Bound to any other
// address, every request must carry the job secret or the dashboard token
// derived from it (dashboard_token()), as `?token=T` or `Authorization:
// Bearer T`, compared in constant time: none is refused with 401, a wrong one with
// 403. Such a bind needs a job secret: without one the constructor throws.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cohort::dashboard {

// "[ADDR:]PORT" (cohortrun --dashboard, COHORT_DASHBOARD): an address (IPv4,
// a name, or [IPv6]) and a port 0..65535 (0 picks a free one); the address
// is 127.0.0.1 when omitted. ConfigError naming `what` otherwise.
struct ServerAddress {
  std::string host = "127.0.0.1";
  int port = 0;
};
ServerAddress parse_server_address(std::string_view text, std::string_view what = "--dashboard");

// The token a non-loopback dashboard prints in its URL: HMAC-SHA256(secret,
// "cohort-dashboard/1") as 64 hex digits, so that the URL cohortrun prints
// cannot join the job's store. The server accepts it or the secret itself
// (docs/security.md has the openssl line to compute it).
std::string dashboard_token(std::string_view secret);

struct ServerOptions {
  ServerAddress address;
  std::string secret;  // the job secret (COHORT_SECRET); needed unless loopback
  int threads = 2;     // requests served at once
};

class DashboardServer {
 public:
  // Binds and starts serving; `status_json` is called for each
  // /api/status, on the server's threads. ConfigError when the address
  // cannot be bound, or is not loopback and `secret` is empty.
  DashboardServer(ServerOptions options, std::function<std::string()> status_json);
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  int port() const;
  bool token_required() const;
  // The page's URL, with ?token= when one is required (for the line the
  // host prints; it holds the token, not the secret).
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::dashboard
