// The dashboard of a real job, seen by a real browser: cohortrun
// --dashboard runs 3 ranks of dashboard_job (fake steps that publish
// telemetry as fit() does); a headless Chromium (Debian's chromium) loads
// the page and dumps its DOM: 3 rank rows whose steps advance between two
// loads, charts with points; a screenshot is written as an artifact. Then
// rank 1 is killed and the page, served on for --dashboard-linger, shows
// the failure naming it; the report cohortrun writes renders the same rows
// from the file alone. Skipped, saying why, only when Chromium cannot start.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>

#include "cohort/common/json.h"
#include "tests/dashboard/dashboard_test_util.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::dashboard::dashboard_job_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::read_text;
using launcher::testing::TempDir;

struct Browser {
  int exit_code = -1;
  std::string out;
};

// Runs headless Chromium on `url` with `mode` (--dump-dom, --screenshot=F);
// its profile in `dir`.
Browser chromium(const std::string& mode, const std::string& url, const TempDir& dir) {
  const std::string out = dir / "chromium.out";
  const std::string command = std::string(CHROMIUM_PATH) +
                              " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
                              " --user-data-dir=" +
                              dir.path() +
                              "/profile --window-size=1280,1500"
                              " --virtual-time-budget=2500 " +
                              mode + " '" + url + "' > " + out + " 2>" + dir.path() + "/chromium.err";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out)};
}

// The data-step of each rank row, by rank.
std::map<int, long> rank_rows(const std::string& dom) {
  std::map<int, long> rows;
  const std::regex row(R"re(<tr class="rank-row[^"]*" data-rank="(\d+)" data-step="(\d+)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator(); ++it)
    rows[std::stoi((*it)[1])] = std::stol((*it)[2]);
  return rows;
}

long chart_points(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("<canvas id=\"" + id + "\" data-points=\"(\\d+)\""))) return -1;
  return std::stol(m[1]);
}

json::Value get_status(int port) {
  httplib::Client client("127.0.0.1", port);
  auto reply = client.Get("/api/status");
  if (!reply || reply->status != 200) return {};
  return json::parse(reply->body, "/api/status");
}

// Polls /api/status until `ready` holds, at most 30 s.
template <typename Pred>
json::Value wait_status(int port, Pred ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    json::Value s = get_status(port);
    if ((s.is_object() && ready(s)) || std::chrono::steady_clock::now() > deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TEST(DashboardJob, ChromiumSeesRanksAdvanceChartsFillAndTheFailure) {
  TempDir dir("dashboard_job_test");
  const std::string report = testing::artifact_path("dashboard_report.html");
  std::filesystem::remove(report);
  CohortrunProcess job(
      COHORTRUN_PATH,
      {"--dashboard", "127.0.0.1:0", "--dashboard-linger", "60", "--report", report, "-np", "3", DASHBOARD_JOB_PATH,
       "--steps", "1000000", "--step-ms", "4", "--steps-per-epoch", "25", "--slow-rank", "2"},
      dir.path());
  ASSERT_TRUE(job.wait_for_error_text("cohortrun: dashboard at http://127.0.0.1:"));
  std::smatch m;
  const std::string err = read_text(dir / "cohortrun.err");
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(dashboard at (http://127\.0\.0\.1:(\d+)/))"))) << err;
  const std::string url = m[1];
  const int port = std::stoi(m[2]);
  // Every rank reported and rank 0 published epochs.
  json::Value status = wait_status(port, [](const json::Value& s) {
    int reporting = 0;
    for (const auto& r : s.at("ranks").items()) reporting += !r.at("sample").is_null();
    return reporting == 3 && s.at("epochs").number() >= 2;
  });
  ASSERT_TRUE(status.is_object());
  ASSERT_EQ(status.at("ranks").items().size(), 3u);
  {
    // The live document of a running job matches its schema too.
    httplib::Client client("127.0.0.1", port);
    auto reply = client.Get("/api/status");
    ASSERT_TRUE(reply);
    testing::expect_valid_status(reply->body);
  }

  const Browser first = chromium("--dump-dom", url, dir);
  if (first.out.find("<html") == std::string::npos)
    GTEST_SKIP() << "headless Chromium (" << CHROMIUM_PATH << ") cannot start here (exit " << first.exit_code
                 << "): " << read_text(dir / "chromium.err").substr(0, 600);
  const std::map<int, long> before = rank_rows(first.out);
  ASSERT_EQ(before.size(), 3u) << first.out;
  EXPECT_NE(first.out.find(R"(data-state="running")"), std::string::npos);
  EXPECT_GT(chart_points(first.out, "steptime"), 0) << first.out;
  EXPECT_GT(chart_points(first.out, "metrics"), 0) << first.out;
  EXPECT_EQ(chart_points(first.out, "split"), 3 * 5);
  EXPECT_NE(first.out.find("dashboard_job (fake steps)"), std::string::npos);  // the strategy line

  const std::string screenshot = testing::artifact_path("dashboard.png");
  std::filesystem::remove(screenshot);
  chromium("--screenshot=" + screenshot, url, dir);
  ASSERT_TRUE(std::filesystem::exists(screenshot));
  EXPECT_GT(std::filesystem::file_size(screenshot), 10000u);
  std::printf("dashboard screenshot: %s\n", screenshot.c_str());

  const Browser second = chromium("--dump-dom", url, dir);
  const std::map<int, long> after = rank_rows(second.out);
  ASSERT_EQ(after.size(), 3u) << second.out;
  for (const auto& [rank, step] : before) EXPECT_GT(after.at(rank), step) << "rank " << rank << "'s step";

  // Kill rank 1: the job fails, cohortrun reports it and keeps serving.
  status = get_status(port);
  const pid_t victim = pid_t(status.at("ranks").items()[1].at("pid").number());
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  status = wait_status(port, [](const json::Value& s) { return s.at("state").string() == "failed"; });
  ASSERT_EQ(status.at("state").string(), "failed");
  const Browser failed = chromium("--dump-dom", url, dir);
  EXPECT_NE(failed.out.find(R"(data-state="failed")"), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("rank 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << failed.out;

  job.signal(SIGTERM);  // ends the linger
  const auto result = job.wait(std::chrono::seconds(30));
  ASSERT_TRUE(result.finished);
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;

  // The report renders the same rows from the file alone (no server).
  ASSERT_TRUE(std::filesystem::exists(report)) << result.err;
  const Browser offline = chromium("--dump-dom", "file://" + report, dir);
  EXPECT_EQ(rank_rows(offline.out).size(), 3u) << offline.out;
  EXPECT_NE(offline.out.find("rank 1 was killed by signal 9"), std::string::npos);
  EXPECT_GT(chart_points(offline.out, "steptime"), 0);
  std::printf("dashboard report: %s\n", report.c_str());
}

}  // namespace
}  // namespace cohort::dashboard::dashboard_job_test
