// The example's flags, JSON-lines metrics and progress formatting.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cohort/common/error.h"
#include "examples/fashion_mnist/lr_schedule.h"
#include "examples/fashion_mnist/metrics.h"
#include "examples/fashion_mnist/options.h"
#include "examples/fashion_mnist/progress.h"
#include "tests/engine/json_check.h"

namespace cohort::testing {
namespace {

namespace ex = cohort::examples;

TEST(FashionMnistOptions, ParsesBothFlagForms) {
  const auto o = ex::parse_options({"--epochs", "3", "--batch-size=32", "--lr", "0.5", "--model", "mlp", "--resume",
                                    "--checkpoint", "/tmp/ck", "--metrics=/tmp/m", "--threads", "2",
                                    "--compression", "bf16", "--optimizer=adam", "--lr-scaling", "none"});
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch_size, 32);
  EXPECT_EQ(o.lr, 0.5);
  EXPECT_EQ(o.model, "mlp");
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.checkpoint, "/tmp/ck");
  EXPECT_EQ(o.metrics, "/tmp/m");
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.compression, "bf16");
  EXPECT_EQ(o.optimizer, "adam");
  EXPECT_EQ(o.lr_scaling, "none");
  EXPECT_FALSE(o.help);
  EXPECT_TRUE(ex::parse_options({"--help"}).help);
}

TEST(FashionMnistOptions, RejectsBadFlagsWithTheirNames) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs", "x"}, "--epochs expects a number, got 'x'"},
      {{"--epochs", "0"}, "--epochs must be at least 1"},
      {{"--model", "resnet"}, "--model expects one of mlp, cnn, got 'resnet'"},
      {{"--frobnicate"}, "unknown flag '--frobnicate'"},
      {{"--lr"}, "--lr needs a value"},
      {{"--lr", "-1"}, "--lr must be positive"},
      {{"--resume"}, "--resume needs --checkpoint FILE"},
      {{"--batch-size", "12abc"}, "--batch-size expects a number, got '12abc'"},
      {{"--target-accuracy", "101"}, "--target-accuracy is a percentage"},
  };
  for (const auto& [args, want] : cases) {
    try {
      ex::parse_options(args);
      ADD_FAILURE() << "no error for " << args[0];
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(FashionMnistMetrics, WritesOneValidJsonObjectPerLine) {
  const std::string path = std::filesystem::temp_directory_path() / ("cohort_metrics_test_" + std::to_string(::getpid()));
  {
    ex::MetricsWriter old(path, false);
    old.write(ex::JsonObject().add("from", "an earlier run"));
  }
  {
    ex::MetricsWriter m(path, /*append=*/false);  // starts over
    m.write(ex::JsonObject().add("event", "step").add("loss", 0.25).add("step", int64_t(3)).add("ok", true));
    m.write(ex::JsonObject().add("name", "quote\" back\\slash\nnewline\x01").add("nan", std::nan("")));
  }
  {
    ex::MetricsWriter again(path, /*append=*/true);
    again.write(ex::JsonObject().add("event", "final"));
  }
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], R"({"event":"step","loss":0.25,"step":3,"ok":true})");
  for (const auto& line : lines) {
    std::string error;
    EXPECT_TRUE(JsonCheck::valid(line, &error)) << line << ": " << error;
  }
  EXPECT_NE(lines[1].find(R"("nan":null)"), std::string::npos) << lines[1];
  EXPECT_THROW(ex::MetricsWriter("/nonexistent-dir/metrics", false), ConfigError);
}

TEST(FashionMnistProgress, DurationsAndPlainLines) {
  EXPECT_EQ(ex::Progress::format_duration(5.4), "5s");
  EXPECT_EQ(ex::Progress::format_duration(65), "1m05s");
  EXPECT_EQ(ex::Progress::format_duration(7265), "2h01m");
  EXPECT_EQ(ex::Progress::format_duration(-1), "?");

  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    ex::Progress p(out, ex::ProgressStyle::lines, "[epoch 1/1]", 20, 64);
    for (int i = 1; i <= 20; ++i) p.update(i, 0.5);
    p.finish();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  // One line per tenth of the epoch, no carriage returns.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 10) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("[epoch 1/1] step 20/20 (100%)  loss 0.5000"), std::string::npos) << text;
  EXPECT_EQ(ex::parse_progress_style("auto", stdout) == ex::ProgressStyle::bar,
            bool(::isatty(::fileno(stdout))));
}

TEST(FashionMnistLrSchedule, LinearWarmUpToTheScaledRate) {
  const ex::LrSchedule s(0.1, 4, true, 10);
  EXPECT_DOUBLE_EQ(s.target(), 0.4);
  EXPECT_NEAR(s.at(0), 0.1 + 0.3 / 10, 1e-12);
  EXPECT_NEAR(s.at(4), 0.1 + 0.3 * 5 / 10, 1e-12);
  EXPECT_DOUBLE_EQ(s.at(9), 0.4);
  EXPECT_DOUBLE_EQ(s.at(1000), 0.4);
  EXPECT_DOUBLE_EQ(ex::LrSchedule(0.1, 4, false, 10).at(0), 0.1);
  EXPECT_DOUBLE_EQ(ex::LrSchedule(0.1, 4, true, 0).at(0), 0.4);
}

}  // namespace
}  // namespace cohort::testing
