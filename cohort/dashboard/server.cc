#include "cohort/dashboard/server.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <httplib.h>

#include <charconv>
#include <optional>
#include <thread>

#include "cohort/common/check.h"
#include "cohort/dashboard/assets.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::dashboard {
namespace {

constexpr std::string_view kTokenLabel = "cohort-dashboard/1";

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The host name of a Host header ("127.0.0.1:8080", "[::1]:8080", "localhost").
std::string host_of_header(const std::string& header) {
  if (!header.empty() && header.front() == '[') {
    const size_t close = header.find(']');
    return close == std::string::npos ? header : header.substr(1, close - 1);
  }
  return header.substr(0, header.find(':'));
}

// The token a request carries: ?token= or "Authorization: Bearer ...".
std::optional<std::string> request_token(const httplib::Request& request) {
  if (request.has_param("token")) return request.get_param_value("token");
  const std::string auth = request.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0) return auth.substr(kBearer.size());
  return std::nullopt;
}

}  // namespace

ServerAddress parse_server_address(std::string_view text, std::string_view what) {
  ServerAddress out;
  std::string_view port = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    COHORT_CHECK_AS(ConfigError, !host.empty() && host.find_first_of("[]") == std::string_view::npos)
        << what << " needs [ADDR:]PORT (e.g. 8265, 127.0.0.1:8265 or [::1]:8265), got '" << text << "'";
    out.host = std::string(host);
  }
  int value = -1;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  COHORT_CHECK_AS(ConfigError, !port.empty() && ec == std::errc() && end == port.data() + port.size() && value >= 0 &&
                                   value <= 65535)
      << what << " needs a port 0..65535 (0 picks a free one) in [ADDR:]PORT, got '" << text << "'";
  out.port = value;
  return out;
}

std::string dashboard_token(std::string_view secret) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(kTokenLabel.data()), kTokenLabel.size(), mac, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[mac[i] >> 4];
    hex += kHex[mac[i] & 15];
  }
  return hex;
}

struct DashboardServer::Impl {
  ServerOptions options;
  std::string token;  // empty: loopback, no token asked
  std::string page;
  httplib::Server server;
  int port = 0;
  std::thread thread;
};

DashboardServer::DashboardServer(ServerOptions options, std::function<std::string()> status_json)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  const std::string& host = s.options.address.host;
  const bool loopback = rendezvous::is_loopback_host(host);
  if (!loopback) {
    COHORT_CHECK_AS(ConfigError, !s.options.secret.empty())
        << "the dashboard on " << host << " (not a loopback address) needs the job secret for its token, and "
        << "COHORT_SECRET is empty; set it, or serve on 127.0.0.1 and reach it through `ssh -L`";
    s.token = dashboard_token(s.options.secret);
  }
  s.page = served_page();
  const int threads = std::max(1, s.options.threads);
  // Headers and body go out in separate writes: without NODELAY, Nagle's
  // algorithm holds the body until the client's delayed ACK (40 ms).
  s.server.set_tcp_nodelay(true);
  s.server.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.server.set_pre_routing_handler([&s, loopback](const httplib::Request& request, httplib::Response& response) {
    if (loopback) {
      // DNS rebinding: a page of another origin that resolves its own name
      // to 127.0.0.1 sends its name as the Host.
      if (rendezvous::is_loopback_host(host_of_header(request.get_header_value("Host"))))
        return httplib::Server::HandlerResponse::Unhandled;
      response.status = 403;
      response.set_content("the dashboard answers only requests addressed to a loopback name\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Chart.js is Debian's file, nothing of the job's: the page loads it
    // without the token.
    if (request.path == "/chart.min.js") return httplib::Server::HandlerResponse::Unhandled;
    const std::optional<std::string> token = request_token(request);
    // The derived token (what the printed URL carries) or the job secret
    // itself (what a user who set COHORT_SECRET knows).
    if (token && (constant_time_equal(*token, s.token) || constant_time_equal(*token, s.options.secret)))
      return httplib::Server::HandlerResponse::Unhandled;
    response.status = token ? 403 : 401;
    if (!token) response.set_header("WWW-Authenticate", "Bearer");
    response.set_content(token ? "wrong dashboard token\n"
                               : "the dashboard needs its token (?token= or Authorization: Bearer; docs/security.md)\n",
                         "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.server.Get("/", [&s](const httplib::Request&, httplib::Response& response) {
    response.set_content(s.page, "text/html; charset=utf-8");
  });
  s.server.Get("/chart.min.js", [](const httplib::Request&, httplib::Response& response) {
    response.set_header("Cache-Control", "max-age=86400");
    response.set_content(std::string(chart_js()), "application/javascript");
  });
  s.server.Get("/api/status",
               [status_json = std::move(status_json)](const httplib::Request&, httplib::Response& response) {
                 response.set_header("Cache-Control", "no-store");
                 response.set_content(status_json(), "application/json");
               });
  const int port = s.options.address.port;
  s.port = port == 0 ? s.server.bind_to_any_port(host) : (s.server.bind_to_port(host, port) ? port : -1);
  COHORT_CHECK_AS(ConfigError, s.port > 0)
      << "the dashboard cannot listen on " << host << ":" << port << " (in use, or not an address of this host)";
  s.thread = std::thread([&s] { s.server.listen_after_bind(); });
}

DashboardServer::~DashboardServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int DashboardServer::port() const { return impl_->port; }

bool DashboardServer::token_required() const { return !impl_->token.empty(); }

std::string DashboardServer::url() const {
  const std::string& host = impl_->options.address.host;
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "http://" + shown + ":" + std::to_string(impl_->port) + "/" +
         (impl_->token.empty() ? "" : "?token=" + impl_->token);
}

}  // namespace cohort::dashboard
