// How long the dashboard takes to answer GET /api/status for a large job
// (issue 34's target: <= 5 ms at 64 ranks): a synthetic state of 64 ranks
// that ran 10^5 steps (a sample every 10 steps per rank: 10^4 per rank,
// downsampled), 100 epochs of 3 logs and 200 events, served by the real
// DashboardServer on loopback, requested over one keep-alive connection
// by cpp-httplib's client. Prints the document's size and the median, 95th
// percentile and maximum of building the JSON (each time anew) and of the
// whole request as served (rebuilt at most every max_status_age_s).
//
//   bench_dashboard_status [ranks] [steps] [requests]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cohort/dashboard/server.h"
#include "cohort/dashboard/state.h"

using Clock = std::chrono::steady_clock;

namespace {

void report(const char* what, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  std::printf("%-28s median %.3f ms  p95 %.3f ms  max %.3f ms  (n=%zu)\n", what, ms[ms.size() / 2],
              ms[ms.size() * 95 / 100], ms.back(), ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cohort;
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 64;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 100000;
  const int requests = argc > 3 ? std::atoi(argv[3]) : 300;
  dashboard::DashboardState state({.size = ranks});
  const double t0 = 1.7e9;
  for (int64_t step = 10; step <= steps; step += 10)
    for (int r = 0; r < ranks; ++r) {
      const double jitter = double((step * 7919 + r * 104729) % 1000) / 1000;
      state.add_sample({.rank = r,
                        .size = ranks,
                        .host = "node" + std::to_string(r / 8),
                        .pid = 10000 + r,
                        .epoch = step / 1000,
                        .step = step,
                        .unix_time_s = t0 + double(step) * 0.01,
                        .window_steps = 10,
                        .step_ms = 10 + jitter,
                        .compute_ms = 6 + jitter,
                        .peer_wait_ms = 2,
                        .transfer_ms = 1,
                        .input_ms = 0.5,
                        .other_ms = 0.5,
                        .samples_per_s = 3200,
                        .rss_bytes = int64_t(2) << 30});
    }
  for (int64_t e = 0; e < 100; ++e)
    state.add_epoch({.epoch = e,
                     .step = (e + 1) * 1000,
                     .unix_time_s = t0 + double(e),
                     .logs = {{"loss", 2.0 / double(e + 1)}, {"accuracy", 0.9}, {"val_loss", 2.1 / double(e + 1)}}});
  for (int i = 0; i < 200; ++i)
    state.add_event(
        {.unix_time_s = t0 + i, .kind = "straggler", .message = "rank 3 (pid 10003 on node0) is 25% slower"});
  state.set_straggler({.present = true,
                       .rank = 3,
                       .host = "node0",
                       .pid = 10003,
                       .cause = "compute",
                       .slower_by = 0.25,
                       .since_unix_s = t0,
                       .unix_time_s = t0 + 1000});

  const double now = t0 + double(steps) * 0.01 + 0.5;
  std::vector<double> build_ms, request_ms;
  size_t bytes = 0;
  for (int i = 0; i < requests; ++i) {
    const auto start = Clock::now();
    bytes = state.status_json(now + i).size();  // a new time each: built, not cached
    build_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  // As the dashboard serves it: rebuilt when the state changed or the
  // document is older than max_status_age_s (here: every 0.25 s of the
  // clock), from the cache in between.
  dashboard::DashboardServer server({}, [&] {
    return state.status_json(now + std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
  });
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  for (int i = 0; i < requests; ++i) {
    const auto start = Clock::now();
    auto reply = client.Get("/api/status");
    request_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!reply || reply->status != 200) {
      std::fprintf(stderr, "bench_dashboard_status: request %d failed\n", i);
      return 1;
    }
  }
  std::printf("%d ranks, %lld steps: /api/status is %zu bytes\n", ranks, (long long)steps, bytes);
  report("status_json() (build)", build_ms);
  report("GET /api/status (loopback)", request_ms);
  return 0;
}
