// The fashion_mnist example end to end: the same program trains a small
// synthetic data set (gzip IDX files) under every strategy, one process or
// two ranks under cohortrun, writes JSON-lines metrics, a checkpoint and a
// backup, resumes from the backup for another epoch, and fails with a clear
// message on a malformed data file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "tests/engine/json_check.h"
#include "tests/torch/fit_events.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/data/idx_test_files.h"

namespace cohort::testing::fashion_mnist_e2e_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::RunResult;
using launcher::testing::split_lines;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/examples/fashion_mnist";
const std::string kServe = std::string(COHORT_BINARY_DIR) + "/examples/fashion_mnist_serve";
const std::string kCohortData = std::string(COHORT_BINARY_DIR) + "/tools/cohort-data";

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
                     "--log-every", "5", "--backup", backup, "--plot", dir_ + "/history"});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("fit: multi_worker:bucket_mb=25,bucket_view=true,compression=none,style=ddp; 2 replicas in 2 "
                       "processes; global batch 32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("epoch 2/2: accuracy"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 90.0) << r.out;
  EXPECT_NE(r.out.find("metrics (JSON lines): " + metrics), std::string::npos);
  EXPECT_NE(r.out.find("checkpoint: " + ck), std::string::npos);
  for (const char* chart : {"/history-loss.png", "/history-accuracy.png"}) {
    const std::vector<char> png = read_file(dir_ + chart);
    EXPECT_EQ(std::string(png.data(), std::min<size_t>(png.size(), 8)), std::string("\x89PNG\r\n\x1a\n", 8)) << chart;
  }

  // Metrics: valid JSON, one start, a step line every 5 steps, two epochs, one end.
  auto lines = metric_lines();
  const FitEvents events = count_fit_events(lines);
  // 640 examples / global batch 32 = 20 steps per epoch.
  EXPECT_EQ(events.starts, 1);
  EXPECT_EQ(events.steps, 40 / 5);
  EXPECT_EQ(events.epochs, 2);
  EXPECT_EQ(events.ends, 1);
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

// TFRecord shards (cohort-data convert) through the input pipeline on two
// ranks, normalised by the analyzers' statistics; the serving program loads
// the checkpoint and the transform artifact and predicts on the raw test
// records what the training job predicted. The augmentation map runs too
// (not in the accuracy run: a flip moves this data set's squares to another
// class's place).
TEST_F(FashionMnistE2E, TrainsFromTfRecordShardsAndServingPredictsAsTraining) {
  const std::string records = dir_ + "/records";
  for (const auto& [idx, prefix, shards] : {std::tuple{"train", "train", "4"}, {"t10k", "test", "2"}}) {
    CohortrunProcess convert(kCohortData,
                             {"convert", "idx", "--images", data_ + "/" + idx + "-images-idx3-ubyte.gz", "--labels",
                              data_ + "/" + idx + "-labels-idx1-ubyte.gz", "--out", records, "--prefix", prefix,
                              "--shards", shards},
                             dir_);
    const RunResult c = convert.wait(std::chrono::seconds(60));
    ASSERT_TRUE(c.finished && c.exit_code == 0) << c.out << c.err;
  }
  const std::string ck = dir_ + "/ck.bin", transform = dir_ + "/fmnist.transform";
  const std::string trained = dir_ + "/trained.txt", served = dir_ + "/served.txt";
  RunResult r = run({"--strategy", "multi_worker", "--epochs", "2", "--data-format", "tfrecord", "--data", records,
                     "--workers", "2", "--checkpoint", ck, "--transform", transform, "--predictions", trained});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("640 train / 200 test examples"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 80.0) << r.out;

  CohortrunProcess serve(kServe, {"--checkpoint", ck, "--transform", transform, "--data", records, "--model", "mlp",
                                  "--quiet", "--predictions", served},
                         dir_);
  const RunResult s = serve.wait(std::chrono::seconds(60));
  ASSERT_TRUE(s.finished && s.exit_code == 0) << s.out << s.err;
  EXPECT_NE(s.out.find("200 records"), std::string::npos) << s.out;
  const std::vector<std::string> want = split_lines(launcher::testing::read_text(trained));
  ASSERT_EQ(want.size(), 200u);
  EXPECT_EQ(split_lines(launcher::testing::read_text(served)), want);

  // Under zero stage 3 with hybrid sharding (4 ranks, blocks split within
  // pairs): --checkpoint is a sharded checkpoint, each block written once
  // (by the first pair), which the serving program reads whole.
  const std::string zck = dir_ + "/zero.ck", ztransform = dir_ + "/zero.transform";
  const std::string ztrained = dir_ + "/zero_trained.txt", zserved = dir_ + "/zero_served.txt";
  const RunResult z = run({"--strategy", "zero:stage=3,shard_group=2", "--epochs", "1", "--data-format", "tfrecord",
                           "--data", records, "--checkpoint", zck, "--transform", ztransform, "--predictions",
                           ztrained},
                          /*ranks=*/4);
  ASSERT_TRUE(z.finished && z.exit_code == 0) << "exit " << z.exit_code << "\n" << z.out << z.err;
  CohortrunProcess zserve(kServe, {"--checkpoint", zck, "--transform", ztransform, "--data", records, "--model",
                                   "mlp", "--quiet", "--predictions", zserved},
                          dir_);
  const RunResult zs = zserve.wait(std::chrono::seconds(60));
  ASSERT_TRUE(zs.finished && zs.exit_code == 0) << zs.out << zs.err;
  const std::vector<std::string> zwant = split_lines(launcher::testing::read_text(ztrained));
  ASSERT_EQ(zwant.size(), 200u);
  EXPECT_EQ(split_lines(launcher::testing::read_text(zserved)), zwant);

  const RunResult a = run({"--strategy", "mirrored:replicas=2", "--epochs", "1", "--data-format", "tfrecord", "--data",
                           records, "--augment", "--limit-train", "128"},
                          /*ranks=*/0);
  ASSERT_TRUE(a.finished && a.exit_code == 0) << "exit " << a.exit_code << "\n" << a.out << a.err;
  EXPECT_NE(a.out.find("128 train / 200 test examples"), std::string::npos) << a.out;

  // A transform that is not one is a clear error.
  std::ofstream(dir_ + "/bad.transform") << "not a transform";
  CohortrunProcess bad(kServe, {"--checkpoint", ck, "--transform", dir_ + "/bad.transform", "--data", records,
                                "--model", "mlp"},
                       dir_);
  const RunResult b = bad.wait(std::chrono::seconds(60));
  EXPECT_EQ(b.exit_code, 2) << b.out << b.err;
  EXPECT_NE(b.err.find("is not a cohort transform"), std::string::npos) << b.err;
}

double parsed(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? std::stod(m[1]) : -1;
}

// Plain `mpirun -np 2` with the default strategy ("auto"): no store address
// is set, and auto discovers the world as init() does (MPI bootstraps the
// store), so the job trains as multi_worker on 2 ranks.
TEST_F(FashionMnistE2E, TrainsUnderPlainMpirunWithTheDefaultStrategy) {
  const std::string mpirun = "/usr/bin/mpirun";
  ASSERT_TRUE(std::filesystem::exists(mpirun)) << "openmpi-bin (scripts/bootstrap.sh) provides mpirun";
  CohortrunProcess p(mpirun,
                     {"--allow-run-as-root",
                      "--oversubscribe",
                      "--bind-to",
                      "none",
                      "-np",
                      "2",
                      kProgram,
                      "--data-dir",
                      data_,
                      "--model",
                      "mlp",
                      "--batch-size",
                      "32",
                      "--lr",
                      "0.1",
                      "--threads",
                      "1",
                      "--progress",
                      "lines",
                      "--epochs",
                      "2"},
                     dir_);
  const RunResult r = p.wait(std::chrono::seconds(120));
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("fit: multi_worker:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 replicas in 2 processes"), std::string::npos) << r.out;
  EXPECT_GE(final_accuracy(r.out), 90.0) << r.out;
}

// DP-SGD on two ranks: the noise searched for the budget, epsilon printed
// after each epoch and growing, the total within the target; a strategy
// with several replicas in a process is refused by name.
TEST_F(FashionMnistE2E, TrainsWithDifferentialPrivacyOnTwoRanks) {
  const RunResult r = run({"--strategy", "multi_worker", "--epochs", "2", "--dp-epsilon", "4", "--dp-max-grad-norm",
                           "1"});
  ASSERT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  // fit()'s start line: the calibrated noise, and the gradient path the model took.
  EXPECT_NE(r.out.find("+privacy:accountant=rdp,clipping=flat,delta=1e-05,max_grad_norm=1,noise_multiplier="),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(noise for epsilon 4 at delta 1e-05 over"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per-sample gradients by kernels"), std::string::npos) << r.out;
  const double first = parsed(r.out, "epoch 1/2:.* epsilon ([0-9.]+)");
  const double second = parsed(r.out, "epoch 2/2:.* epsilon ([0-9.]+)");
  const double spent = parsed(r.out, "privacy spent: epsilon ([0-9.]+) at delta 1e-05");
  EXPECT_GT(first, 0) << r.out;
  EXPECT_GT(second, first) << r.out;
  EXPECT_NEAR(spent, second, 1e-4) << r.out;
  EXPECT_LE(spent, 4.0) << r.out;
  EXPECT_GE(spent, 3.9) << "the searched noise spends nearly all of the budget\n" << r.out;

  const RunResult refused = run({"--strategy", "mirrored:replicas=2", "--dp-epsilon", "4"}, /*ranks=*/0);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("private training runs one replica per process"), std::string::npos) << refused.err;
}

// The same program on parameter servers: 2 workers and 1 server (the last
// rank), which never runs the program's fit().
TEST_F(FashionMnistE2E, TrainsOnParameterServers) {
  const std::string ck = dir_ + "/ck.bin", backup = dir_ + "/backup";
  for (const std::string strategy : {"parameter_server:servers=1", "parameter_server:servers=1,optimizer=sgd,lr=0.1"}) {
    const RunResult r = run({"--strategy", strategy, "--epochs", "2", "--checkpoint", ck, "--backup", backup},
                            /*ranks=*/3);
    ASSERT_TRUE(r.finished && r.exit_code == 0) << strategy << ": exit " << r.exit_code << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("fit: parameter_server:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("; 2 replicas in 2 processes; global batch 32"), std::string::npos) << r.out;
    EXPECT_GE(final_accuracy(r.out), 90.0) << strategy << "\n" << r.out;
    EXPECT_NE(r.out.find("checkpoint: " + ck), std::string::npos) << r.out;
  }
}

// ZeRO at 4 real processes, hybrid (blocks split within pairs of ranks,
// replicated across the pairs) at stage 3, with a checkpoint and a backup:
// it trains as multi_worker does (the same data order and averaged
// gradients: the accuracies agree to one test example of 200).
TEST_F(FashionMnistE2E, TrainsUnderZeroAsMultiWorkerDoes) {
  const RunResult ddp = run({"--strategy", "multi_worker", "--epochs", "2"}, /*ranks=*/4);
  ASSERT_TRUE(ddp.finished && ddp.exit_code == 0) << ddp.out << ddp.err;
  const std::string ck = dir_ + "/zero.ck", backup = dir_ + "/zero_backup";
  const RunResult zero = run({"--strategy", "zero:stage=3,shard_group=2", "--epochs", "2", "--checkpoint", ck,
                              "--backup", backup},
                             /*ranks=*/4);
  ASSERT_TRUE(zero.finished && zero.exit_code == 0) << zero.out << zero.err;
  EXPECT_NE(zero.out.find("fit: zero:bucket_mb=25,shard_group=2,stage=3,unit_mb=1;"), std::string::npos) << zero.out;
  EXPECT_GE(final_accuracy(zero.out), 90.0) << zero.out;
  EXPECT_NEAR(final_accuracy(zero.out), final_accuracy(ddp.out), 0.5) << zero.out << ddp.out;
  // ModelCheckpoint under zero: a sharded checkpoint, every rank its shard.
  EXPECT_TRUE(std::filesystem::exists(ck + "/manifest")) << zero.out;
  int shards = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ck))
    shards += entry.path().filename().string().starts_with("shard-");
  EXPECT_EQ(shards, 2 * 4) << "this save's and the one before's, 4 ranks each";
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
}  // namespace cohort::testing::fashion_mnist_e2e_test
