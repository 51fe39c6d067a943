// Check macros and the error hierarchy.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <type_traits>

#include "cohort/common/check.h"
#include "cohort/common/error.h"

namespace cohort::check_test {
namespace {

// Runs `fn`, expects an exception of type E, and returns its message.
template <typename E, typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Check, PassingCheckThrowsNothingAndSkipsTheMessage) {
  int evaluated = 0;
  auto side_effect = [&] {
    ++evaluated;
    return "message";
  };
  EXPECT_NO_THROW(COHORT_CHECK(1 + 1 == 2) << side_effect());
  EXPECT_NO_THROW(COHORT_CHECK_EQ(4, 4) << side_effect());
  EXPECT_NO_THROW(COHORT_CHECK_LT(3, 4) << side_effect());
  EXPECT_NO_THROW(COHORT_CHECK_AS(ConfigError, true) << side_effect());
  EXPECT_EQ(evaluated, 0) << "the streamed message is built only on failure";
}

// Runs `fn`, expects a cohort::Error, and returns it (what() and where()).
template <typename Fn>
std::pair<std::string, std::string> error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.what(), e.where()};
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST(Check, WhatIsTheMessageAndWhereIsTheLocationAndCondition) {
  const auto [what, where] = error_of([] {
    const int fd = -1;
    COHORT_CHECK(fd >= 0) << "open " << "/tmp/x" << ": denied";
  });
  EXPECT_EQ(what, "open /tmp/x: denied") << "the user's message, nothing before it";
  EXPECT_TRUE(where.starts_with("check_test.cc:")) << where;
  EXPECT_TRUE(where.ends_with(": check failed: fd >= 0")) << where;
  EXPECT_FALSE(contains(where, "/")) << "only the file's base name: " << where;
}

TEST(Check, WithoutAMessageTheConditionIsTheMessage) {
  const auto [what, where] = error_of([] {
    const int fd = -1;
    COHORT_CHECK(fd >= 0);
  });
  EXPECT_EQ(what, "check failed: fd >= 0");
  EXPECT_TRUE(where.starts_with("check_test.cc:")) << where;
}

TEST(Check, ComparisonLeadsWithTheMessageAndReportsBothOperandValues) {
  const auto [what, where] = error_of([] {
    const size_t send_count = 12, recv_count = 13;
    COHORT_CHECK_EQ(send_count, recv_count) << "allreduce buffers differ";
  });
  EXPECT_EQ(what, "allreduce buffers differ (send_count == recv_count: 12 vs 13)");
  EXPECT_TRUE(where.ends_with(": check failed: send_count == recv_count (12 vs 13)")) << where;

  const auto [bare, bare_where] = error_of([] {
    const size_t send_count = 12, recv_count = 13;
    COHORT_CHECK_LT(recv_count, send_count);
  });
  EXPECT_EQ(bare, "check failed: recv_count < send_count (13 vs 12)");
}

TEST(Check, EveryComparisonFormFailsOnlyWhenItShould) {
  EXPECT_THROW(COHORT_CHECK_EQ(1, 2), Error);
  EXPECT_THROW(COHORT_CHECK_NE(2, 2), Error);
  EXPECT_THROW(COHORT_CHECK_LT(2, 2), Error);
  EXPECT_THROW(COHORT_CHECK_LE(3, 2), Error);
  EXPECT_THROW(COHORT_CHECK_GT(2, 2), Error);
  EXPECT_THROW(COHORT_CHECK_GE(1, 2), Error);
  EXPECT_NO_THROW(COHORT_CHECK_NE(1, 2));
  EXPECT_NO_THROW(COHORT_CHECK_LE(2, 2));
  EXPECT_NO_THROW(COHORT_CHECK_GE(2, 2));
  EXPECT_NO_THROW(COHORT_CHECK_GT(3, 2));
}

TEST(Check, OperandsAreEvaluatedOnce) {
  int a = 0, b = 0;
  EXPECT_NO_THROW(COHORT_CHECK_EQ(a++, b++));
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  EXPECT_THROW(COHORT_CHECK_NE(a++, b++), Error);
  EXPECT_EQ(a, 2);
}

TEST(Check, CharOperandsPrintAsNumbers) {
  const std::string what = message_of<Error>([] {
    const int8_t x = 65;
    const uint8_t y = 200;
    COHORT_CHECK_EQ(x, y);
  });
  EXPECT_EQ(what, "check failed: x == y (65 vs 200)");
}

TEST(Check, UnprintableOperandsStillReport) {
  struct Opaque {
    int v;
    bool operator==(const Opaque& o) const { return v == o.v; }
  };
  const std::string what = message_of<Error>([] { COHORT_CHECK_EQ(Opaque{1}, Opaque{2}); });
  EXPECT_TRUE(contains(what, "<unprintable> vs <unprintable>")) << what;
}

TEST(Check, AsThrowsTheChosenKind) {
  const std::string what = message_of<ConfigError>([] {
    const int n = 0;
    COHORT_CHECK_AS(ConfigError, n > 0) << "COHORT_SIZE must be positive";
  });
  EXPECT_EQ(what, "COHORT_SIZE must be positive");
  EXPECT_THROW(COHORT_CHECK_AS(TimeoutError, false), TimeoutError);

  const std::string mismatch = message_of<MismatchError>([] {
    COHORT_CHECK_EQ_AS(MismatchError, 3, 4) << "tensor grad/fc1";
  });
  EXPECT_EQ(mismatch, "tensor grad/fc1 (3 == 4: 3 vs 4)");
  EXPECT_THROW(COHORT_CHECK_LE_AS(ConfigError, 5, 4), ConfigError);
  EXPECT_THROW(COHORT_CHECK_LT_AS(ConfigError, 4, 4), ConfigError);
  EXPECT_THROW(COHORT_CHECK_GE_AS(ConfigError, 3, 4), ConfigError);
}

TEST(Check, ThrowIsTheMessageAndTheKindIsTheType) {
  const std::string what = message_of<TimeoutError>([] {
    COHORT_THROW(TimeoutError) << "no reply from rank " << 3;
  });
  EXPECT_EQ(what, "no reply from rank 3");
  const auto [bare, where] = error_of([] { COHORT_THROW(MismatchError); });
  EXPECT_EQ(bare, "MismatchError") << "with no message, the kind is all there is";
  EXPECT_TRUE(where.starts_with("check_test.cc:")) << where;
  EXPECT_FALSE(contains(where, "check failed")) << where;
}

TEST(Check, ErrorsMadeByHandHaveNoLocation) {
  EXPECT_EQ(ConfigError("bad flag").where(), "");
  EXPECT_EQ(PeerLostError("gone", 1).where(), "");
}

// The macros expand to if/else; an `else` written after one must still bind
// to the caller's `if`.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-else"  // the point of this test
TEST(Check, MacroIsSafeInsideUnbracedIfElse) {
  int branch = 0;
  const bool outer = false;
  if (outer)
    COHORT_CHECK(false) << "never evaluated";
  else
    branch = 2;
  EXPECT_EQ(branch, 2);
}
#pragma GCC diagnostic pop

TEST(Errors, HierarchyAndPeerLostDetails) {
  static_assert(std::is_base_of_v<std::runtime_error, Error>);
  static_assert(std::is_base_of_v<Error, ConfigError>);
  static_assert(std::is_base_of_v<Error, TimeoutError>);
  static_assert(std::is_base_of_v<Error, PeerLostError>);
  static_assert(std::is_base_of_v<Error, MismatchError>);

  try {
    throw PeerLostError("rank 2 died", 2, "node7", "segfault in forward");
  } catch (const Error& e) {
    const auto* lost = dynamic_cast<const PeerLostError*>(&e);
    ASSERT_NE(lost, nullptr);
    EXPECT_EQ(lost->rank(), 2);
    EXPECT_EQ(lost->host(), "node7");
    EXPECT_EQ(lost->last_words(), "segfault in forward");
    EXPECT_STREQ(e.what(), "rank 2 died");
  }
  PeerLostError unknown("gone", -1);
  EXPECT_EQ(unknown.rank(), -1);
  EXPECT_TRUE(unknown.host().empty());
}

}  // namespace
}  // namespace cohort::check_test
