// The fashion_mnist example end to end, as real processes under cohortrun:
// two ranks train on a small synthetic data set written as gzip IDX files,
// write JSON-lines metrics and a checkpoint, resume from it, and fail with a
// clear message on a malformed data file.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <regex>

#include "tests/engine/json_check.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/data/idx_test_files.h"

namespace cohort::testing {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::split_lines;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/examples/fashion_mnist";

// Class c lights up a 6x6 square at a position of its own, over noise: an
// easy problem a working training loop solves within two epochs.
void write_split(const std::string& dir, const std::string& prefix, uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> images(size_t(n) * 28 * 28), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    const int c = int(rng() % 10);
    labels[i] = uint8_t(c);
    uint8_t* img = &images[size_t(i) * 28 * 28];
    for (int p = 0; p < 28 * 28; ++p) img[p] = uint8_t(rng() % 60);
    const int top = 2 + (c / 5) * 12, left = 1 + (c % 5) * 5;
    for (int y = top; y < top + 6; ++y)
      for (int x = left; x < left + 6 && x < 28; ++x) img[y * 28 + x] = uint8_t(200 + rng() % 56);
  }
  write_gzip(dir + "/" + prefix + "-images-idx3-ubyte.gz", idx_bytes({n, 28, 28}, images));
  write_gzip(dir + "/" + prefix + "-labels-idx1-ubyte.gz", idx_bytes({n}, labels));
}

class FashionMnistE2E : public ::testing::Test {
 protected:
  FashionMnistE2E() {
    char pattern[] = "/tmp/cohort_fmnist_e2e.XXXXXX";
    dir_ = ::mkdtemp(pattern);
    data_ = dir_ + "/data";
    std::filesystem::create_directory(data_);
    write_split(data_, "train", 640, 1);
    write_split(data_, "t10k", 200, 2);
  }
  ~FashionMnistE2E() override { std::filesystem::remove_all(dir_); }

  RunResult run(const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"-np", "2", kProgram, "--data-dir", data_, "--model", "mlp", "--batch-size",
                                     "16", "--lr", "0.05", "--threads", "1", "--progress", "lines"};
    args.insert(args.end(), flags.begin(), flags.end());
    CohortrunProcess p(kCohortrun, args, dir_);
    return p.wait(std::chrono::seconds(120));
  }

  std::vector<std::string> metric_lines() {
    return split_lines(launcher::testing::read_text(dir_ + "/metrics.jsonl"));
  }

  std::string dir_, data_;
};

double final_accuracy(const std::string& out) {
  std::smatch m;
  const std::regex re("final test accuracy ([0-9.]+)%");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1;
}

TEST_F(FashionMnistE2E, TrainsCheckpointsAndResumesOnTwoRanks) {
  const std::string ck = dir_ + "/ck.bin", metrics = dir_ + "/metrics.jsonl";
  RunResult r = run({"--epochs", "2", "--checkpoint", ck, "--metrics", metrics, "--log-every", "5"});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("2 ranks x batch 16 = 32 per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 2/2: train loss"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 90.0) << r.out;
  EXPECT_NE(r.out.find("metrics (JSON lines): " + metrics), std::string::npos);
  EXPECT_NE(r.out.find("checkpoint: " + ck), std::string::npos);

  // Metrics: valid JSON, one start, a step line every 5 steps, two epochs, one final.
  auto lines = metric_lines();
  int starts = 0, steps = 0, epochs = 0, finals = 0;
  for (const auto& line : lines) {
    std::string error;
    EXPECT_TRUE(JsonCheck::valid(line, &error)) << line << ": " << error;
    starts += line.find(R"("event":"start")") != std::string::npos;
    steps += line.find(R"("event":"step")") != std::string::npos;
    epochs += line.find(R"("event":"epoch")") != std::string::npos;
    finals += line.find(R"("event":"final")") != std::string::npos;
  }
  // 640 examples / 2 ranks / 16 = 20 steps per epoch.
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(steps, 40 / 5);
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(finals, 1);
  const auto ck_bytes = read_file(ck);
  ASSERT_GE(ck_bytes.size(), 32u);
  EXPECT_EQ(std::string(ck_bytes.data(), 8), "COHORTCK");
  EXPECT_TRUE(std::filesystem::exists(ck + ".prev")) << "the epoch-1 checkpoint is kept as the previous one";

  // Resume for a third epoch: starts at epoch 3, step 40, appends metrics.
  r = run({"--epochs", "3", "--checkpoint", ck, "--metrics", metrics, "--resume"});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("resumed from " + ck + " at epoch 3, batch 0 (step 40)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("epoch 1/3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 3/3: train loss"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 90.0) << r.out;
  lines = metric_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find(R"("step":60)"), std::string::npos) << lines.back();
}

TEST_F(FashionMnistE2E, MalformedDataFailsWithAClearMessage) {
  write_gzip(data_ + "/t10k-labels-idx1-ubyte.gz", idx_bytes({200, 1}, std::vector<uint8_t>(200)));
  const RunResult r = run({"--epochs", "1"});
  ASSERT_TRUE(r.finished) << r.out << r.err;
  // The ranks exit with 2 (a configuration error); cohortrun reports the
  // first failing rank and exits with 1.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("exited with code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("t10k-labels-idx1-ubyte.gz: 2 dimensions, expected 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cohort::testing
