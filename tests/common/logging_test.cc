// Levelled logging: level names, the threshold, the line format.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/common/logging.h"

namespace cohort::logging::logging_test {
namespace {

// Restores the threshold and rank a test changed.
class LoggingTest : public testing::Test {
 protected:
  void SetUp() override { saved_ = threshold(); }
  void TearDown() override {
    set_threshold(saved_);
    set_rank(-1);
  }

 private:
  Level saved_ = Level::warn;
};

// Captures what is written to stderr (fd 2) while it lives.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    char path[] = "/tmp/cohort_logging_test_XXXXXX";
    fd_ = ::mkstemp(path);
    ::unlink(path);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fd_, STDERR_FILENO);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::string out;
    char buf[4096];
    ::lseek(fd_, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd_, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  void restore() {
    if (saved_ >= 0) {
      ::dup2(saved_, STDERR_FILENO);
      ::close(saved_);
      saved_ = -1;
    }
  }
  int fd_ = -1;
  int saved_ = -1;
};

TEST_F(LoggingTest, ParsesEveryLevelName) {
  EXPECT_EQ(parse_level("trace"), Level::trace);
  EXPECT_EQ(parse_level("debug"), Level::debug);
  EXPECT_EQ(parse_level("info"), Level::info);
  EXPECT_EQ(parse_level("warn"), Level::warn);
  EXPECT_EQ(parse_level("error"), Level::error);
  EXPECT_EQ(parse_level("off"), Level::off);
}

TEST_F(LoggingTest, BadLevelThrowsConfigErrorNamingTheVariable) {
  for (const char* bad : {"verbose", "", "WARN", "warning"}) {
    SCOPED_TRACE(bad);
    try {
      parse_level(bad);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("COHORT_LOG_LEVEL"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
}

TEST_F(LoggingTest, ThresholdIsSettable) {
  set_threshold(Level::debug);
  EXPECT_EQ(threshold(), Level::debug);
  set_threshold(Level::off);
  EXPECT_EQ(threshold(), Level::off);
}

TEST_F(LoggingTest, StatementsBelowThresholdEvaluateNothing) {
  set_threshold(Level::warn);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  StderrCapture capture;
  COHORT_LOG(debug) << count();
  COHORT_LOG(info) << count();
  COHORT_LOG(warn) << count();
  COHORT_LOG(error) << count();
  EXPECT_EQ(evaluated, 2);
  set_threshold(Level::off);
  COHORT_LOG(error) << count();
  EXPECT_EQ(evaluated, 2);
  const std::string text = capture.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

TEST_F(LoggingTest, LineCarriesRankLevelAndTime) {
  set_threshold(Level::info);
  set_rank(3);
  StderrCapture capture;
  COHORT_LOG(warn) << "rank " << 5 << " has not submitted grad/fc1";
  const std::string text = capture.text();
  EXPECT_TRUE(std::regex_match(
      text, std::regex(R"(\[cohort 3 W \d\d:\d\d:\d\d\.\d\d\d\] rank 5 has not submitted grad/fc1\n)")))
      << text;
}

TEST_F(LoggingTest, UnknownRankShowsDash) {
  set_threshold(Level::trace);
  set_rank(-1);
  StderrCapture capture;
  COHORT_LOG(trace) << "t";
  COHORT_LOG(error) << "e";
  const std::string text = capture.text();
  EXPECT_TRUE(std::regex_match(text, std::regex(R"(\[cohort - T [0-9:.]+\] t\n\[cohort - E [0-9:.]+\] e\n)")))
      << text;
}

TEST_F(LoggingTest, DebugLevelLogsWhereEachErrorIsRaised) {
  auto raise = [] {
    try {
      COHORT_CHECK_AS(ConfigError, 1 > 2) << "one is not above two";
    } catch (const ConfigError&) {
    }
  };
  set_threshold(Level::debug);
  StderrCapture capture;
  raise();
  set_threshold(Level::info);
  raise();
  const std::string text = capture.text();
  EXPECT_TRUE(std::regex_match(
      text, std::regex(R"(\[cohort - D [0-9:.]+\] raising ConfigError at logging_test\.cc:\d+: )"
                       R"(check failed: 1 > 2: one is not above two\n)")))
      << text;
}

// A malformed COHORT_LOG_LEVEL is read for the first time in a fresh process
// (the threadsafe style re-executes the test binary): reading it raises a
// ConfigError, whose raising consults the level again without recursing.
TEST(LoggingDeathTest, MalformedLevelRaisesConfigErrorOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("COHORT_LOG_LEVEL", "loud", 1);
        bool named = false;
        try {
          (void)threshold();
        } catch (const ConfigError& e) {
          named = std::string(e.what()).find("COHORT_LOG_LEVEL='loud'") != std::string::npos;
        }
        std::_Exit(named && would_log(Level::warn) && !would_log(Level::info) ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace cohort::logging::logging_test
