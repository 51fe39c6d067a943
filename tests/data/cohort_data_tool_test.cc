// cohort-data end to end, as a user runs it: convert IDX and text to shards,
// inspect them (exit 0 with the counts; exit 1 naming the file and the byte
// offset of a damaged record), rebuild indexes, and refuse bad flags with
// exit status 2.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "cohort/data/record_index.h"
#include "cohort/data/record_source.h"
#include "tests/data/idx_test_files.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::cohort_data_tool_test {
namespace {

struct ToolRun {
  int status;
  std::string output;  // stdout and stderr
};

ToolRun run(const std::string& args) {
  const std::string line = std::string(COHORT_BINARY_DIR) + "/tools/cohort-data " + args + " 2>&1";
  FILE* p = ::popen(line.c_str(), "r");
  ToolRun r{-1, {}};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CohortData, ConvertIdxThenInspectAndCatchDamage) {
  testing::TempDir dir;
  std::vector<uint8_t> pixels(25 * 4 * 3), labels(25);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7 + 3);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = uint8_t(i % 10);
  ::cohort::testing::write_gzip(dir.file("img.gz"), ::cohort::testing::idx_bytes({25, 4, 3}, pixels));
  ::cohort::testing::write_plain(dir.file("lbl"), ::cohort::testing::idx_bytes({25}, labels));
  const std::string out = dir.file("shards");
  ToolRun r = run("convert idx --images " + dir.file("img.gz") + " --labels " + dir.file("lbl") + " --out " + out +
              " --shards 3 --prefix train");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "train-00002-of-00003.tfrecord: 9 records")) << r.output;

  r = run("inspect --examples " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "total: 25 records, no errors")) << r.output;
  EXPECT_TRUE(has(r.output, "features: image bytes[1], image_shape i64[2], label i64[1]")) << r.output;

  // The shards hold the IDX samples in order, as Examples.
  RecordSource source(list_record_files(out));
  ASSERT_EQ(source.size(), 25u);
  EXPECT_EQ(source.file_sizes(), (std::vector<uint64_t>{8, 8, 9}));
  for (uint64_t i = 0; i < 25; ++i) {
    const Sample s = source.read(i);
    EXPECT_EQ(s["image"].strings()[0], std::string(pixels.begin() + long(i * 12), pixels.begin() + long(i * 12 + 12)));
    EXPECT_EQ(s["label"].values<int64_t>()[0], int64_t(i % 10));
    EXPECT_EQ(s["image_shape"].values<int64_t>()[1], 3);
  }

  // Damage record 5 of shard 1: inspect names the file and the frame.
  const std::string victim = out + "/train-00001-of-00003.tfrecord";
  const RecordIndex index = load_index(index_path(victim), victim, std::filesystem::file_size(victim));
  auto bytes = testing::slurp(victim);
  bytes[index.offset(5) + 20] ^= 0x10;
  testing::spit(victim, bytes);
  r = run("inspect " + out);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, victim + ": corrupt record at byte offset " + std::to_string(index.offset(5)) +
                                ": data CRC mismatch"))
      << r.output;
  EXPECT_TRUE(has(r.output, "total: 17 records")) << r.output;  // the good files still counted
  r = run("index " + victim);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "no index written")) << r.output;
}

TEST(CohortData, IndexRebuildsTheSidecars) {
  testing::TempDir dir;
  const std::string text = dir.file("lines.txt");
  testing::spit(text, {'a', '\n', '\n', 'b', 'c', '\n', 'd'});
  const std::string out = dir.file("out");
  ToolRun r = run("convert text --out " + out + " --shards 2 --skip-empty-lines " + text);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> files = list_record_files(out);
  ASSERT_EQ(files.size(), 2u);
  const auto original = testing::slurp(index_path(files[0]));
  std::filesystem::remove(index_path(files[0]));
  std::filesystem::remove(index_path(files[1]));
  r = run("index " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(testing::slurp(index_path(files[0])), original);
  RecordSource source(files);
  ASSERT_EQ(source.size(), 3u);
  EXPECT_EQ(source.read(1)["text"].strings()[0], "bc");
  EXPECT_EQ(source.read(2)["text"].strings()[0], "d");
}

TEST(CohortData, BadCommandLinesExitTwo) {
  for (const char* args : {"", "frobnicate", "convert", "convert idx --out x", "convert png --out x",
                           "inspect --bogus x", "convert text --out x --shards 0 y", "inspect /nonexistent"}) {
    const ToolRun r = run(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_TRUE(has(r.output, "cohort-data")) << args;
    EXPECT_FALSE(has(r.output, ".cc:")) << "no source locations for users: " << r.output;
  }
}

}  // namespace
}  // namespace cohort::data::cohort_data_tool_test
