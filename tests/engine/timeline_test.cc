// The timeline: a valid Chrome trace JSON document holding every phase of
// the engine's ops, written by rank 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "cohort/engine/timeline.h"
#include "tests/engine/engine_ranks.h"
#include "tests/engine/json_check.h"

namespace cohort::testing::timeline_test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + name + "_" + std::to_string(::getpid()) + ".json";
}

TEST(JsonCheck, AcceptsValidAndRejectsInvalid) {
  EXPECT_TRUE(JsonCheck::valid(R"([{"a": 1.5e3, "b": [true, null, "x\"\u00e9"]}, -0.25])"));
  EXPECT_TRUE(JsonCheck::valid("[]"));
  for (const char* bad : {"[", "[1,]", "{\"a\" 1}", "[\"\x01\"]", "[01]", "[1] x", "{'a': 1}", "[1.]"})
    EXPECT_FALSE(JsonCheck::valid(bad)) << bad;
}

TEST(Timeline, WritesValidJsonWithEscapedNames) {
  const std::string path = temp_path("timeline_unit");
  {
    engine::Timeline t(path, 0, "unit \"label\"");
    const auto now = engine::Timeline::Clock::now();
    t.span("weird \"name\"\n\\", "COLLECTIVE", now, now + std::chrono::microseconds(5), "\"bytes\": 4");
    t.instant("lane", "mark", now);
    t.flush();
    // Before the Timeline closes, the file is a prefix of the document.
    EXPECT_FALSE(read_file(path).empty());
  }
  const std::string text = read_file(path);
  std::string err;
  EXPECT_TRUE(JsonCheck::valid(text, &err)) << err << "\n" << text;
  EXPECT_NE(text.find("weird \\\"name\\\"\\n\\\\"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ph\": \"X\""), std::string::npos);
  EXPECT_NE(text.find("\"ph\": \"i\""), std::string::npos);
  std::remove(path.c_str());
}

TEST(Timeline, EngineRecordsEveryPhaseOfItsOps) {
  const std::string path = temp_path("timeline_engine");
  auto options = engine_test_options();
  options.timeline_path = path;
  options.label = "tl";
  options.fusion_threshold_bytes = 1 << 20;
  uint64_t fused = 0;
  run_engine_ranks(2, [&](EngineRank& info, engine::Engine& e) {
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> bufs(30, std::vector<float>(100, 1.0f));
      std::vector<engine::Handle> hs;
      for (size_t i = 0; i < bufs.size(); ++i)
        hs.push_back(e.allreduce_async("grad/" + std::to_string(i), BufferView{bufs[i].data(), 100, DType::f32}));
      std::vector<float> big(1 << 19, 1.0f);  // 2 MiB: above the threshold, unfused
      hs.push_back(e.allreduce_async("big", BufferView{big.data(), big.size(), DType::f32}));
      for (auto& h : hs) h.wait();
    }
    if (info.rank == 0) fused = e.stats().fused_ops;
  }, options);
  const std::string text = read_file(path);
  std::string err;
  ASSERT_TRUE(JsonCheck::valid(text, &err)) << err;
  for (const char* phase : {"\"QUEUE\"", "\"NEGOTIATE\"", "\"WAIT_FOR_CYCLE\"", "\"COLLECTIVE\"", "\"ALLREDUCE\"",
                            "\"CYCLE\"", "\"grad/3\"", "\"big\"", "\"cycles\"", "cohort engine 'tl' rank 0"})
    EXPECT_NE(text.find(phase), std::string::npos) << phase << " missing from the timeline";
  // Fused ops have their copy phases (fusion itself is asserted in the ops tests).
  for (const char* phase : {"\"FUSION_COPY_IN\"", "\"COPY_OUT\""})
    EXPECT_EQ(text.find(phase) != std::string::npos, fused > 0) << phase << " with " << fused << " fused ops";
  // Every allreduce of rank 0 appears once per step.
  size_t count = 0;
  for (size_t at = 0; (at = text.find("\"name\": \"ALLREDUCE\"", at)) != std::string::npos; ++at) ++count;
  EXPECT_EQ(count, 62u);
  std::remove(path.c_str());
}

TEST(Timeline, AnUnwritablePathFailsEveryRanksEngine) {
  auto options = engine_test_options();
  options.timeline_path = "/nonexistent-cohort-dir/timeline.json";
  auto errors = run_engine_ranks_collect(3, [](EngineRank&, engine::Engine&) { ADD_FAILURE() << "engine started"; },
                                         options);
  // Rank 0 reports the path. The others report that rank 0 failed through
  // the engine (generation -1), or, when a failed rank's communicator was
  // destroyed while they still read the broadcast, through the communicator.
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[size_t(r)]) << "rank " << r;
    try {
      std::rethrow_exception(errors[size_t(r)]);
    } catch (const Error& e) {
      const std::string m = e.what();
      if (r == 0)
        EXPECT_NE(m.find("cannot create '/nonexistent-cohort-dir/timeline.json'"), std::string::npos) << m;
      else
        EXPECT_TRUE(m.find("rank 0 failed to start its engine") != std::string::npos ||
                    m.find("left the communicator on an exception") != std::string::npos)
            << m;
    }
  }
}

}  // namespace
}  // namespace cohort::testing::timeline_test
