// The dashboard's pieces without a job: the downsampled series, the state
// fed from a store as the ranks and the launcher feed it, /api/status
// against its schema, the server's access rules, the report.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>

#include "cohort/common/json.h"
#include "cohort/common/network_interface.h"
#include "cohort/dashboard/assets.h"
#include "cohort/dashboard/history.h"
#include "cohort/dashboard/report.h"
#include "cohort/dashboard/server.h"
#include "cohort/dashboard/state.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/keys.h"
#include "cohort/telemetry/straggler.h"
#include "tests/dashboard/dashboard_test_util.h"

namespace cohort::dashboard::dashboard_test {
namespace {

TEST(Series, StaysBoundedAndEachPointIsTheMeanOfTheAppendsItCovers) {
  Series series(240);
  const int64_t n = 100000;
  double sum = 0;
  for (int64_t i = 1; i <= n; ++i) {
    series.append(double(i), 3.0 * double(i) + 1);  // y = 3x + 1: a mean of points lies on the line
    sum += 3.0 * double(i) + 1;
  }
  const std::vector<Point> points = series.points();
  EXPECT_LE(points.size(), series.capacity() + 1);
  EXPECT_GE(points.size(), series.capacity() / 2);
  EXPECT_EQ(series.appended(), n);
  double weighted = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_DOUBLE_EQ(points[i].y, 3 * points[i].x + 1) << "point " << i;
    if (i > 0) {
      EXPECT_GT(points[i].x, points[i - 1].x);
    }
    // Every full point covers `stride` appends; the last one the rest.
    const double covers =
        i + 1 < points.size() || n % series.stride() == 0 ? double(series.stride()) : double(n % series.stride());
    weighted += points[i].y * covers;
  }
  EXPECT_NEAR(weighted, sum, sum * 1e-12);
  EXPECT_DOUBLE_EQ(points.front().x, (1.0 + double(series.stride())) / 2);  // the mean of 1..stride
}

telemetry::RankSample sample(int rank, int64_t step, double compute_ms, double t) {
  return {.rank = rank,
          .size = 3,
          .host = "h" + std::to_string(rank),
          .pid = 100 + rank,
          .epoch = step / 10,
          .step = step,
          .unix_time_s = t,
          .window_steps = 5,
          .step_ms = compute_ms + 3.25,
          .compute_ms = compute_ms,
          .peer_wait_ms = 1,
          .transfer_ms = 0.5,
          .input_ms = 1,
          .checkpoint_ms = 0.25,
          .other_ms = 0.5,
          .samples_per_s = 1000,
          .rss_bytes = 1 << 20};
}

// A store as a job leaves it: three ranks' samples, rank 0's records.
void publish_job_state(rendezvous::Store& store, int64_t step, double t) {
  for (int r = 0; r < 3; ++r)
    store.set(telemetry::keys::rank_sample(r), telemetry::to_json(sample(r, step, r == 2 ? 30 : 10, t)));
  telemetry::publish_job(store, {.strategy = "mirrored",
                                 .backend = "shm",
                                 .size = 3,
                                 .replicas = 3,
                                 .global_batch = 96,
                                 .epochs = 5,
                                 .steps_per_epoch = 10,
                                 .unix_time_s = t});
  for (int64_t e = 0; e < step / 10; ++e)
    telemetry::publish_epoch(
        store, e, {.epoch = e, .step = (e + 1) * 10, .unix_time_s = t, .logs = {{"loss", 1.0 / double(e + 1)}}});
}

TEST(DashboardState, FollowsTheStoreAndTheLauncher) {
  rendezvous::MemoryStore store;
  DashboardState state({.size = 3});
  EXPECT_EQ(state.phase(), JobPhase::starting);
  state.set_rank_process(1, "launcher-host", 101);
  publish_job_state(store, 10, 1000);
  state.poll(store);
  publish_job_state(store, 30, 1001);
  telemetry::StragglerVerdict verdict{.present = true,
                                      .rank = 2,
                                      .host = "h2",
                                      .pid = 102,
                                      .cause = "compute",
                                      .slower_by = 1.5,
                                      .since_unix_s = 999,
                                      .unix_time_s = 1001};
  store.set(telemetry::keys::kStraggler, telemetry::to_json(verdict));
  telemetry::publish_event(store, {.unix_time_s = 1001, .kind = "straggler", .message = verdict.message()});
  rendezvous::publish_membership(store, {.epoch = 0, .members = {{0, 0}, {1, 0}, {2, 0}}});
  state.poll(store);
  state.poll(store);  // nothing new: nothing counted twice

  const Status s = state.status(1002);
  EXPECT_EQ(s.phase, JobPhase::running);
  ASSERT_EQ(s.ranks.size(), 3u);
  EXPECT_EQ(s.ranks[1].host, "launcher-host");  // the launcher's word stands
  EXPECT_EQ(s.ranks[2].host, "h2");
  ASSERT_TRUE(s.ranks[2].sample);
  EXPECT_EQ(s.ranks[2].sample->step, 30);
  EXPECT_DOUBLE_EQ(s.ranks[2].heartbeat_age_s, 1.0);
  // Steps 1..10 at the first sample's means, 11..30 at the second's.
  EXPECT_DOUBLE_EQ(s.ranks[2].time.compute_ms, 30.0 * 30);
  EXPECT_DOUBLE_EQ(s.ranks[2].time.wait_ms, 1.5 * 30);
  EXPECT_DOUBLE_EQ(s.ranks[0].time.input_ms, 1.0 * 30);
  EXPECT_DOUBLE_EQ(s.ranks[0].time.checkpoint_ms, 0.25 * 30);
  ASSERT_EQ(s.ranks[0].step_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(s.ranks[0].step_ms[1].x, 30);
  EXPECT_DOUBLE_EQ(s.ranks[0].step_ms[1].y, 13.25);
  EXPECT_EQ(s.epochs, 3);
  ASSERT_EQ(s.metrics.size(), 1u);
  ASSERT_EQ(s.metrics[0].points.size(), 3u);
  EXPECT_NEAR(s.metrics[0].points[2].y, 1.0 / 3, 1e-9);  // records carry 9 digits
  ASSERT_TRUE(s.job);
  EXPECT_EQ(s.job->strategy, "mirrored");
  ASSERT_TRUE(s.straggler && s.straggler->present);
  EXPECT_EQ(s.straggler->rank, 2);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].kind, "straggler");
  EXPECT_EQ(s.events[1].kind, "membership");
  EXPECT_NE(s.events[1].message.find("epoch 0: 3 rank(s)"), std::string::npos) << s.events[1].message;

  state.set_rank_ended(1, "was killed by signal 9 (SIGKILL)");
  state.set_phase(JobPhase::failed, "cohortrun: rank 1 was killed by signal 9 (SIGKILL)\n");
  const json::Value doc = json::parse(state.status_json(1003));
  EXPECT_EQ(doc.at("state").string(), "failed");
  EXPECT_EQ(doc.at("ranks").items()[1].at("ended").string(), "was killed by signal 9 (SIGKILL)");
  EXPECT_NE(doc.at("failure").string().find("rank 1 was killed"), std::string::npos);
}

TEST(DashboardState, StatusValidatesAgainstTheDocumentedSchema) {
  rendezvous::MemoryStore store;
  DashboardState state({.size = 4});  // rank 3 never reports: its row has no sample
  publish_job_state(store, 20, 1000);
  store.set(telemetry::keys::kStraggler, telemetry::to_json(telemetry::StragglerVerdict{}));
  telemetry::publish_event(store, {.unix_time_s = 1000, .kind = "failure", .message = "x"});
  state.poll(store);
  testing::expect_valid_status(state.status_json(1001));
  testing::expect_valid_status(DashboardState({.size = 2}).status_json(5));  // a job before its first record
}

// The first non-loopback IPv4 address of this machine, "" when it has none.
std::string non_loopback_address() {
  for (const std::string& iface : net::interfaces_with_ipv4()) {
    const std::string address = net::interface_ipv4(iface);
    if (!address.empty() && address.rfind("127.", 0) != 0) return address;
  }
  return "";
}

TEST(DashboardServer, NonLoopbackBindAsksForTheTokenOfTheJobSecret) {
  EXPECT_THROW(DashboardServer({.address = {"0.0.0.0", 0}}, [] { return "{}"; }), ConfigError);
  const std::string secret = "0123456789abcdef0123456789abcdef";
  // Requests from this machine's own non-loopback address are not from
  // loopback; without one, 0.0.0.0 still asks loopback clients for it.
  std::string address = non_loopback_address();
  const std::string bind = address.empty() ? "0.0.0.0" : address;
  if (address.empty()) address = "127.0.0.1";
  DashboardServer server({.address = {bind, 0}, .secret = secret}, [] { return R"({"schema":"x"})"; });
  ASSERT_TRUE(server.token_required());
  const std::string token = dashboard_token(secret);
  EXPECT_EQ(token.size(), 64u);
  EXPECT_NE(token, dashboard_token("another secret"));
  EXPECT_NE(server.url().find("?token=" + token), std::string::npos);

  httplib::Client client(address, server.port());
  auto none = client.Get("/api/status");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(none->body.find("schema"), std::string::npos);
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 401);
  auto wrong = client.Get("/api/status?token=" + dashboard_token("guess"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 403);
  auto secret_itself = client.Get("/api/status?token=" + secret);  // the job secret is accepted too
  ASSERT_TRUE(secret_itself);
  EXPECT_EQ(secret_itself->status, 200);
  auto secret_prefix = client.Get("/api/status?token=" + secret.substr(0, 16));
  ASSERT_TRUE(secret_prefix);
  EXPECT_EQ(secret_prefix->status, 403);
  auto by_query = client.Get("/api/status?token=" + token);
  ASSERT_TRUE(by_query);
  EXPECT_EQ(by_query->status, 200);
  EXPECT_EQ(by_query->body, R"({"schema":"x"})");
  auto by_header = client.Get("/api/status", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(by_header);
  EXPECT_EQ(by_header->status, 200);
  auto chart = client.Get("/chart.min.js");  // Debian's file: no token asked
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 200);
  EXPECT_EQ(chart->body.size(), chart_js().size());
}

TEST(DashboardServer, LoopbackServesWithoutTokenToLoopbackNamesOnly) {
  DashboardServer server({}, [] { return std::string("{}"); });
  EXPECT_FALSE(server.token_required());
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/");
  httplib::Client client("127.0.0.1", server.port());
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find(R"(<script src="chart.min.js"></script>)"), std::string::npos);
  auto status = client.Get("/api/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_EQ(status->get_header_value("Content-Type"), "application/json");
  // A page of evil.example whose name resolved to 127.0.0.1 (DNS rebinding).
  auto rebound = client.Get("/api/status", {{"Host", "evil.example:" + std::to_string(server.port())}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
}

TEST(DashboardServer, AddressesParseOrSayWhatIsExpected) {
  EXPECT_EQ(parse_server_address("8265").host, "127.0.0.1");
  EXPECT_EQ(parse_server_address("8265").port, 8265);
  EXPECT_EQ(parse_server_address("0.0.0.0:0").host, "0.0.0.0");
  EXPECT_EQ(parse_server_address("[::1]:80").host, "::1");
  for (const char* bad : {"", "x", "1:", ":80", "host:65536", "host:-1", "[::1:80", "host:80x"})
    EXPECT_THROW(parse_server_address(bad), ConfigError) << bad;
}

TEST(Report, IsOneSelfContainedFileWithTheStatusInline) {
  DashboardState state({.size = 3});
  rendezvous::MemoryStore store;
  publish_job_state(store, 20, 1000);
  // A message that would end the script element early if written raw.
  telemetry::publish_event(
      store, {.unix_time_s = 1000, .kind = "failure", .message = "</script><script>document.title='pwned'</script>"});
  state.poll(store);
  const std::string status = state.status_json(1001);
  const std::string html = render_report(status);
  EXPECT_EQ(std::regex_search(html, std::regex(R"((src|href)\s*=\s*["']?(https?:)?//)", std::regex::icase)), false);
  EXPECT_EQ(html.find("<script src="), std::string::npos);
  EXPECT_NE(html.find("Chart.js v" + std::string(chart_js_version())), std::string::npos);
  EXPECT_EQ(html.find("</script><script>document.title"), std::string::npos);
  // The status is there to read back whole.
  const size_t at = html.find("window.COHORT_STATUS = ");
  ASSERT_NE(at, std::string::npos);
  const size_t from = at + std::strlen("window.COHORT_STATUS = ");
  std::string inline_json = html.substr(from, html.find(";</script>", from) - from);
  for (size_t i; (i = inline_json.find("<\\/")) != std::string::npos;) inline_json.replace(i, 3, "</");
  EXPECT_EQ(inline_json, status);

  const std::string path = testing::artifact_path("report_unit.html");
  write_report(path, status);
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), html);
}

}  // namespace
}  // namespace cohort::dashboard::dashboard_test
