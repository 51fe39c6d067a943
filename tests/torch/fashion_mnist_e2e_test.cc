// The fashion_mnist example end to end: the same program trains a small
// synthetic data set (gzip IDX files) under every strategy, one process or
// two ranks under cohortrun, writes JSON-lines metrics, a checkpoint and a
// backup, resumes from the backup for another epoch, and fails with a clear
// message on a malformed data file.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <regex>

#include "tests/engine/json_check.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/torch/idx_test_files.h"

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

  // Under cohortrun with `ranks` ranks (0: the program alone).
  RunResult run(const std::vector<std::string>& flags, int ranks = 2) {
    std::vector<std::string> args = {kProgram, "--data-dir", data_, "--model", "mlp", "--batch-size", "32",
                                     "--lr", "0.1", "--threads", "1", "--progress", "lines"};
    if (ranks > 0) args.insert(args.begin(), {"-np", std::to_string(ranks)});
    args.insert(args.end(), flags.begin(), flags.end());
    CohortrunProcess p(ranks > 0 ? kCohortrun : kProgram,
                       ranks > 0 ? args : std::vector<std::string>(args.begin() + 1, args.end()), dir_);
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

TEST_F(FashionMnistE2E, TrainsCheckpointsAndBacksUpOnTwoRanks) {
  const std::string ck = dir_ + "/ck.bin", metrics = dir_ + "/metrics.jsonl", backup = dir_ + "/backup";
  RunResult r = run({"--strategy", "multi_worker", "--epochs", "2", "--checkpoint", ck, "--metrics", metrics,
                     "--log-every", "5", "--backup", backup});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("on multi_worker:bucket_mb=25,bucket_view=true,compression=none,style=ddp (2 replicas), global batch 32"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 2/2: accuracy"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 90.0) << r.out;
  EXPECT_NE(r.out.find("metrics (JSON lines): " + metrics), std::string::npos);
  EXPECT_NE(r.out.find("checkpoint: " + ck), std::string::npos);

  // Metrics: valid JSON, one start, a step line every 5 steps, two epochs, one end.
  auto lines = metric_lines();
  int starts = 0, steps = 0, epochs = 0, ends = 0;
  for (const auto& line : lines) {
    std::string error;
    EXPECT_TRUE(JsonCheck::valid(line, &error)) << line << ": " << error;
    starts += line.find(R"("event":"start")") != std::string::npos;
    steps += line.find(R"("event":"step")") != std::string::npos;
    epochs += line.find(R"("event":"epoch")") != std::string::npos;
    ends += line.find(R"("event":"end")") != std::string::npos;
  }
  // 640 examples / global batch 32 = 20 steps per epoch.
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(steps, 40 / 5);
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(ends, 1);
  const auto ck_bytes = read_file(ck);
  ASSERT_GE(ck_bytes.size(), 32u);
  EXPECT_EQ(std::string(ck_bytes.data(), 8), "COHORTCK");
  EXPECT_TRUE(std::filesystem::exists(ck + ".prev")) << "the epoch-1 checkpoint is kept as the previous one";
  // A successful fit() removes its backup.
  EXPECT_FALSE(std::filesystem::exists(backup + "/backup.ckpt"));
}

// The same source under each single-process strategy: no change but the flag.
TEST_F(FashionMnistE2E, TrainsUnderEverySingleProcessStrategy) {
  for (const std::string strategy : {"one_device", "mirrored:replicas=2", "central_storage:replicas=3"}) {
    const RunResult r = run({"--strategy", strategy, "--epochs", "2"}, /*ranks=*/0);
    ASSERT_TRUE(r.finished && r.exit_code == 0) << strategy << ": exit " << r.exit_code << "\n" << r.out << r.err;
    EXPECT_GE(final_accuracy(r.out), 90.0) << strategy << "\n" << r.out;
  }
  // A single-process strategy refuses to run as one rank of several.
  const RunResult r = run({"--strategy", "one_device"}, /*ranks=*/2);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("trains in one process, but this is rank"), std::string::npos) << r.err;
}

// The same program on parameter servers: 2 workers and 1 server (the last
// rank), which never runs the program's fit().
TEST_F(FashionMnistE2E, TrainsOnParameterServers) {
  const std::string ck = dir_ + "/ck.bin", backup = dir_ + "/backup";
  for (const std::string strategy : {"parameter_server:servers=1", "parameter_server:servers=1,optimizer=sgd,lr=0.1"}) {
    const RunResult r = run({"--strategy", strategy, "--epochs", "2", "--checkpoint", ck, "--backup", backup},
                            /*ranks=*/3);
    ASSERT_TRUE(r.finished && r.exit_code == 0) << strategy << ": exit " << r.exit_code << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("on parameter_server:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(2 replicas), global batch 32"), std::string::npos) << r.out;
    EXPECT_GE(final_accuracy(r.out), 90.0) << strategy << "\n" << r.out;
    EXPECT_NE(r.out.find("checkpoint: " + ck), std::string::npos) << r.out;
  }
}

TEST_F(FashionMnistE2E, MalformedDataFailsWithAClearMessage) {
  write_gzip(data_ + "/t10k-labels-idx1-ubyte.gz", idx_bytes({200, 1}, std::vector<uint8_t>(200)));
  const RunResult r = run({"--strategy", "multi_worker", "--epochs", "1"});
  ASSERT_TRUE(r.finished) << r.out << r.err;
  // The ranks exit with 2 (a configuration error); cohortrun reports the
  // first failing rank and exits with 1.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("exited with code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("t10k-labels-idx1-ubyte.gz: 2 dimensions, expected 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cohort::testing
