// The plan file (common/plan_file.h): what cohort-plan writes reads back
// equal; every malformed field is a one-line error naming the file, the
// place and what was expected.
#include "cohort/common/plan_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "cohort/common/error.h"

namespace cohort::plan_file_test {
namespace {

std::string write(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/cohort_plan_file_test.json";
  std::ofstream(path) << text;
  return path;
}

TEST(PlanFile, WhatIsWrittenReadsBackEqual) {
  PlanFile plan;
  plan.strategy = "zero:stage=3,bucket_mb=25";
  plan.np = 16;
  plan.machine_type = "c6i \"8xl\"";
  plan.machines = 4;
  plan.ranks_per_machine = 4;
  plan.backend = "hierarchical";
  plan.env = {{"COHORT_FUSION_THRESHOLD_BYTES", "67108864"}, {"COHORT_CYCLE_TIME_MS", "2.5"}};
  plan.command = "cohortrun -np 16 -H a:4,b:4,c:4,d:4 ./train --strategy plan:plan.json";
  plan.predicted_step_s = 0.1234567890123;
  plan.predicted_total_s = 8200.5;
  plan.predicted_cost = 37.25;
  plan.predicted_memory_per_rank_bytes = 3.1e9;
  plan.predicted_bottleneck = "network";
  plan.mesh = PlanMesh{.dp = 2, .pp = 4, .tp = 2, .micro_batches = 8, .schedule = "1f1b", .zero = true};
  const PlanFile back = read_plan_file(write(plan_file_text(plan)));
  EXPECT_EQ(back.strategy, plan.strategy);
  EXPECT_EQ(back.np, 16);
  EXPECT_EQ(back.machine_type, plan.machine_type);
  EXPECT_EQ(back.machines, 4);
  EXPECT_EQ(back.ranks_per_machine, 4);
  EXPECT_EQ(back.backend, "hierarchical");
  EXPECT_EQ(back.env, plan.env);
  EXPECT_EQ(back.command, plan.command);
  EXPECT_DOUBLE_EQ(back.predicted_step_s, plan.predicted_step_s);
  EXPECT_DOUBLE_EQ(back.predicted_total_s, 8200.5);
  EXPECT_DOUBLE_EQ(back.predicted_cost, 37.25);
  EXPECT_DOUBLE_EQ(back.predicted_memory_per_rank_bytes, 3.1e9);
  EXPECT_EQ(back.predicted_bottleneck, "network");
  EXPECT_EQ(back.mesh, plan.mesh);
  plan.mesh.reset();
  EXPECT_FALSE(read_plan_file(write(plan_file_text(plan))).mesh);
}

TEST(PlanFile, MalformedFieldsAreOneLineErrorsNamingFileFieldAndExpectation) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", ":1:1: a plan file is a JSON object"},
      {R"({"strategy": "auto"})", ":1:1: a plan file needs 'version' and 'strategy'"},
      {R"({"version": 2, "strategy": "auto"})", ":1:13: plan version 2 is newer than this cohort reads (1)"},
      {R"({"version": 1, "strategy": ""})", ":1:28: plan field 'strategy' must be a strategy spec"},
      {R"({"version": 1, "strategy": "plan:x.json"})", "plan field 'strategy' must be a strategy spec"},
      {R"({"version": 1, "strategy": 3})", ":1:28: expected a string, got a number"},
      {R"({"version": 1, "strategy": "auto", "np": 0})", ":1:42: plan field 'np' must be a whole number of at least 1"},
      {R"({"version": 1, "strategy": "auto", "env": {"OMP_NUM_THREADS": "1"}})",
       "plan field 'env' sets 'OMP_NUM_THREADS', which is not a COHORT_* variable"},
      {R"({"version": 1, "strategy": "auto", "env": []})", "plan field 'env' must be an object"},
      {R"({"version": 1, "strategy": "auto", "predicted": {"step": 1}})", "unknown plan field 'predicted.step'"},
      {R"({"version": 1, "strategy": "auto", "stratgy": "zero"})", "unknown plan field 'stratgy'"},
      {R"({"version": 1, "strategy": "auto", "mesh": {"dp": 2, "pq": 2}})", "unknown plan field 'mesh.pq'"},
      {R"({"version": 1, "strategy": "auto", "mesh": {"tp": 0}})",
       "plan field 'mesh.tp' must be a whole number of at least 1"},
      {R"({"version": 1, "strategy": "auto",})", ":1:35: expected a member name in double quotes"},
  };
  for (const auto& [text, want] : cases) {
    const std::string path = write(text);
    try {
      read_plan_file(path);
      ADD_FAILURE() << "no error for " << text;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << text << ": " << what;
      EXPECT_NE(what.find(want), std::string::npos) << text << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(PlanFile, DifferencesFromTheLaunchAreNamed) {
  PlanFile plan;
  plan.strategy = "auto";
  plan.np = 4;
  plan.backend = "gloo";
  plan.env = {{"COHORT_PLAN_FILE_TEST_A", "1"}, {"COHORT_PLAN_FILE_TEST_B", "2"}};
  ::setenv("COHORT_PLAN_FILE_TEST_A", "1", 1);
  ::setenv("COHORT_PLAN_FILE_TEST_B", "3", 1);
  ::setenv("COHORT_BACKEND", "gloo", 1);
  EXPECT_EQ(
      plan_differences(plan, 2),
      (std::vector<std::string>{"the plan sets COHORT_PLAN_FILE_TEST_B=2, this process has COHORT_PLAN_FILE_TEST_B=3",
                                "the plan is for 4 ranks, this job has 2"}));
  ::setenv("COHORT_PLAN_FILE_TEST_B", "2", 1);
  EXPECT_TRUE(plan_differences(plan, 4).empty());
  EXPECT_TRUE(plan_differences(plan, 0).empty());  // not launched: nothing to compare
  ::unsetenv("COHORT_BACKEND");
  EXPECT_EQ(plan_differences(plan, 4),
            (std::vector<std::string>{"the plan uses COHORT_BACKEND=gloo, this process has COHORT_BACKEND unset"}));
}

// A plan on cohort's automatic backend, as an earlier cohort-plan wrote it
// ("auto"), reads as "" and asks no COHORT_BACKEND of the launch.
TEST(PlanFile, AnAutoBackendAsksNoBackendOfTheLaunch) {
  const PlanFile plan = read_plan_file(write(R"({"version": 1, "strategy": "one_device", "backend": "auto"})"));
  EXPECT_EQ(plan.backend, "");
  ::unsetenv("COHORT_BACKEND");
  EXPECT_TRUE(plan_differences(plan, 1).empty());
}

}  // namespace
}  // namespace cohort::plan_file_test
