// Histories: merging steps, the checkpoint encoding, validation; and the
// Accountant over them.
#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/privacy/accountant.h"
#include "cohort/privacy/history.h"
#include "cohort/privacy/rdp.h"

namespace cohort::privacy::history_test {
namespace {

TEST(History, EqualStepsMergeIntoOneSegment) {
  History h;
  append_steps(h, 1.1, 0.01);
  append_steps(h, 1.1, 0.01, 9);
  append_steps(h, 1.1, 0.02, 5);
  append_steps(h, 1.1, 0.02, 0);
  append_steps(h, 1.1, 0.01);
  EXPECT_EQ(h, (History{{1.1, 0.01, 10}, {1.1, 0.02, 5}, {1.1, 0.01, 1}}));
  EXPECT_EQ(total_steps(h), 16);
}

TEST(History, EncodingRoundTripsEveryBit) {
  const History h{{1.0 / 3, 2048.0 / 60000, 1172}, {0.1 + 0.2, 1e-300, 0}, {0, 1, 7}};
  EXPECT_EQ(decode_history(encode_history(h)), h);
  EXPECT_EQ(decode_history(""), History{});
}

TEST(History, CorruptTextIsAConfigError) {
  for (const char* bad : {"1.0 0.1 10", "1.0 0.1\n", "x 0.1 10\n", "1.0 0.1 10 4\n", "1.0 1.5 10\n",
                          "-1 0.1 10\n", "1.0 0.1 -3\n", "nan 0.1 1\n", "1.0 0.1 2.5\n"})
    EXPECT_THROW(decode_history(bad), ConfigError) << "'" << bad << "'";
}

TEST(History, ValidationNamesTheField) {
  try {
    validate({1.0, 1.5, 1});
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sample rate"), std::string::npos);
  }
}

// An accountant stepped T times equals one computed from the history; a
// restored history continues where it stopped (the checkpoint path).
TEST(Accountant, StepsAndRestoredHistoriesAgree) {
  Accountant a(AccountantKind::rdp);
  for (int i = 0; i < 2250; ++i) a.step(1.5, 0.04);
  EXPECT_EQ(a.history(), (History{{1.5, 0.04, 2250}}));
  Accountant b(AccountantKind::rdp);
  b.set_history(decode_history(encode_history({{1.5, 0.04, 1250}})));
  b.step(1.5, 0.04, 1000);
  EXPECT_EQ(a.epsilon(1e-5), b.epsilon(1e-5));
  EXPECT_EQ(a.epsilon(1e-5), rdp_epsilon({{1.5, 0.04, 2250}}, 1e-5).epsilon);
}

TEST(Accountant, KindNames) {
  EXPECT_EQ(parse_accountant_kind("rdp"), AccountantKind::rdp);
  EXPECT_EQ(parse_accountant_kind("prv"), AccountantKind::prv);
  EXPECT_EQ(accountant_name(AccountantKind::prv), "prv");
  EXPECT_THROW(parse_accountant_kind("gdp"), ConfigError);
}

}  // namespace
}  // namespace cohort::privacy::history_test
