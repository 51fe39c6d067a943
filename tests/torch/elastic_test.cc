// Elastic training with real processes (issue 18): cohortrun --min-np runs
// elastic_program on 3 ranks; a rank killed with SIGKILL at a random point
// of a step (seeded: any slot, rank 0 included; before its allreduce, after
// it, or after its commit) leaves the survivors to go on from their newest
// commit in a world of 2, and its replacement joins at a later commit. The
// job ends with every row of every epoch trained on exactly once (the
// committed counts), and with the parameters of a float64 reference that
// replays the world sizes the job recorded step by step (each step's global
// batch follows from them) without any failure. Below --min-np for
// --elastic-timeout, the job ends saying so. fit() under zero keeps each
// rank's blocks and a copy of another's, never the whole state, and loses a
// commit only when a part and its copy die together. fit() under parameter
// servers takes the servers back to its commit with it, through a worker's
// or a server's loss. A cut link (network
// namespaces) is treated like a death: the silent member is killed once its
// heartbeats stop, and the survivors abandon the collective they wait in.
// fit() also goes on over an input pipeline (its cursor committed and
// re-dealt) and under DP-SGD (its accountant rolled back with the model).
// No process or shared-memory segment is left behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "cohort/tensorboard/event_file_name.h"
#include "cohort/tensorboard/event_file_reader.h"
#include "tests/cluster/emulated_cluster.h"
#include "tests/launcher/cohortrun_process.h"
#include "tests/torch/elastic_rows.h"

namespace cohort::testing::elastic_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::read_text;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/tests/torch/elastic_program";
constexpr int64_t kRows = 96, kBatch = 4, kEpochs = 3;

// The program's output lines "name v0 v1 ..." by name.
std::map<std::string, std::vector<double>> read_result(const std::string& path) {
  std::map<std::string, std::vector<double>> result;
  std::istringstream lines(read_text(path));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::string name;
    cells >> name;
    for (double v; cells >> v;) result[name].push_back(v);
  }
  return result;
}


// One process training on every step's whole global batch, in float64:
// SGD (lr 0.05, momentum 0.9, PyTorch's rule) on the mean squared error's
// half, from `initial` (3 weights, then the bias). `scale_lr`: the rate is
// 0.05 at 3 members, linear in the step's world size.
std::vector<double> reference(std::vector<double> w, const std::vector<double>& sizes, bool scale_lr) {
  std::vector<double> momentum(w.size(), 0);
  int64_t cursor = 0;
  for (size_t step = 0; step < sizes.size(); ++step) {
    const int64_t take = std::min(int64_t(sizes[step]) * kBatch, kRows - cursor);
    std::vector<double> grad(w.size(), 0);
    for (int64_t i = cursor; i < cursor + take; ++i) {
      double pred = w[3];
      for (int j = 0; j < 3; ++j) pred += w[size_t(j)] * elastic_feature(i, j);
      const double e = pred - elastic_target(i);
      for (int j = 0; j < 3; ++j) grad[size_t(j)] += e * elastic_feature(i, j) / double(take);
      grad[3] += e / double(take);
    }
    for (size_t k = 0; k < w.size(); ++k) {
      momentum[k] = step == 0 ? grad[k] : 0.9 * momentum[k] + grad[k];
      w[k] -= (scale_lr ? 0.05 * sizes[step] / 3 : 0.05) * momentum[k];
    }
    cursor = (cursor + take) % kRows;
  }
  return w;
}

// fit()'s run on one process, in float64: global batches of `batch` rows in
// order, the mean squared error, SGD (lr 0.05, momentum 0.9) from `initial`.
// Returns the parameters; `losses` gets each epoch's mean loss over its rows
// (each row's loss at the parameters of its step), as fit's history logs it.
std::vector<double> fit_reference(std::vector<double> w, int64_t batch, std::vector<double>& losses) {
  std::vector<double> momentum(w.size(), 0);
  bool first = true;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    double loss = 0;
    for (int64_t begin = 0; begin < kRows; begin += batch) {
      const int64_t end = std::min(kRows, begin + batch);
      std::vector<double> grad(w.size(), 0);
      for (int64_t i = begin; i < end; ++i) {
        double pred = w[3];
        for (int j = 0; j < 3; ++j) pred += w[size_t(j)] * elastic_feature(i, j);
        const double e = pred - elastic_target(i);
        loss += e * e;
        for (int j = 0; j < 3; ++j) grad[size_t(j)] += 2 * e * elastic_feature(i, j) / double(end - begin);
        grad[3] += 2 * e / double(end - begin);
      }
      for (size_t k = 0; k < w.size(); ++k) {
        momentum[k] = first ? grad[k] : 0.9 * momentum[k] + grad[k];
        w[k] -= 0.05 * momentum[k];
      }
      first = false;
    }
    losses.push_back(loss / double(kRows));
  }
  return w;
}

std::vector<std::string> segments(const std::string& job) {
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("cohort-" + job + "-", 0) == 0) left.push_back(e.path().string());
  return left;
}

// Live processes whose command line mentions `text` (the job's directory).
int processes_naming(const std::string& text) {
  int found = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(e.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(text) != std::string::npos) ++found;
  }
  return found;
}

struct JobRun {
  RunResult result;
  std::map<std::string, std::vector<double>> out;
};

JobRun run_job(const TempDir& dir, const std::string& job, std::vector<std::string> flags,
               const std::vector<std::string>& program_args, int64_t batch = kBatch,
               const std::map<std::string, std::string>& env = {}, int np = 3) {
  std::vector<std::string> args = {"-np", std::to_string(np), "--job-id", job};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {kProgram, "--out", dir / "out.txt", "--rows", std::to_string(kRows), "--batch",
                           std::to_string(batch), "--epochs", std::to_string(kEpochs)});
  args.insert(args.end(), program_args.begin(), program_args.end());
  std::map<std::string, std::string> environment = launcher::testing::clean_environment();
  for (const auto& [name, value] : env) environment[name] = value;
  CohortrunProcess p(kCohortrun, args, dir.path(), environment);
  JobRun run;
  run.result = p.wait(std::chrono::seconds(120));
  if (std::filesystem::exists(dir / "out.txt")) run.out = read_result(dir / "out.txt");
  EXPECT_TRUE(segments(job).empty()) << "shared memory left behind by job " << job;
  EXPECT_EQ(processes_naming(dir.path()), 0) << "processes of job " << job << " left behind";
  return run;
}

// The job ended with a failure whose report says `message`, within 60 s.
void expect_job_fails_saying(const JobRun& run, const std::string& message) {
  ASSERT_TRUE(run.result.finished);
  EXPECT_NE(run.result.exit_code, 0);
  EXPECT_NE(run.result.err.find(message), std::string::npos) << run.result.err;
  EXPECT_LT(run.result.seconds, 60);
}

// Every row of every epoch trained on exactly once: the counts a --fit run
// of the linear model committed.
void expect_every_row_once(const JobRun& run) {
  const auto& counts = run.out.at("counts");
  ASSERT_EQ(counts.size(), size_t(kRows));
  for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], double(kEpochs)) << "row " << i;
}

// The parameters and every epoch's loss of a --fit run equal one process's
// fit on the same global batches of `batch` rows, and every row was trained
// on once an epoch.
void expect_one_process_fit(const JobRun& run, int64_t batch) {
  expect_every_row_once(run);
  std::vector<double> losses;
  const std::vector<double> expected = fit_reference(run.out.at("initial"), batch, losses);
  const auto& params = run.out.at("params");
  ASSERT_EQ(params.size(), expected.size());
  for (size_t k = 0; k < params.size(); ++k) EXPECT_NEAR(params[k], expected[k], 1e-12) << "parameter " << k;
  const auto& logged = run.out.at("losses");
  ASSERT_EQ(logged.size(), losses.size());
  for (size_t e = 0; e < losses.size(); ++e) EXPECT_NEAR(logged[e], losses[e], 1e-12) << "epoch " << e;
}

TEST(Elastic, SurvivorsGoOnFromTheirNewestCommitAndAReplacementJoins) {
  // 24 steps at 3 ranks; the kill lands in the first epoch so that the
  // replacement (a LibTorch process starting) has time to join. Seed 3
  // scales the learning rate with the world (linear scaling).
  const char* phases[] = {"before", "after", "commit"};
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    const int slot = int(rng() % 3);
    const int64_t step = 2 + int64_t(rng() % 6);
    const std::string phase = phases[rng() % 3];
    SCOPED_TRACE("seed " + std::to_string(seed) + ": slot " + std::to_string(slot) + " killed at step " +
                 std::to_string(step) + ", " + phase);
    TempDir dir("elastic_test");
    const std::string job = "elastic" + std::to_string(seed);
    const bool scale_lr = seed == 3;
    std::vector<std::string> args = {"--kill", std::to_string(slot) + ":" + std::to_string(step) + ":" + phase,
                                     "--step-delay-ms", "100"};
    if (scale_lr) args.push_back("--scale-lr");
    const JobRun run = run_job(dir, job, {"--min-np", "2", "--max-restarts", "1"}, args);
    ASSERT_TRUE(run.result.finished);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
    EXPECT_NE(run.result.err.find("(SIGKILL); starting slot " + std::to_string(slot) + " again"), std::string::npos)
        << run.result.err;
    const auto& sizes = run.out.at("sizes");
    ASSERT_EQ(run.out.at("steps").at(0), double(sizes.size()));
    // 3 ranks, then 2 from the failed step on, then 3 again.
    EXPECT_EQ(sizes.front(), 3);
    const auto two = std::find(sizes.begin(), sizes.end(), 2.0);
    ASSERT_NE(two, sizes.end()) << "the survivors never trained as 2";
    // Killed before its allreduce, step `step` is redone by the survivors;
    // after its commit, the next one is theirs. Killed between the two, the
    // survivors may have finished the step's allreduces and committed it
    // (their newest commit wins) or not (they redo it).
    const int64_t first_two = two - sizes.begin();
    if (phase == "before") {
      EXPECT_EQ(first_two, step);
    } else if (phase == "commit") {
      EXPECT_EQ(first_two, step + 1);
    } else {
      EXPECT_TRUE(first_two == step || first_two == step + 1) << first_two;
    }
    EXPECT_EQ(sizes.back(), 3) << "the replacement never joined";
    // Every row of every epoch trained on exactly once.
    const auto& counts = run.out.at("counts");
    ASSERT_EQ(counts.size(), size_t(kRows));
    for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], double(kEpochs)) << "row " << i;
    const std::vector<double> expected = reference(run.out.at("initial"), sizes, scale_lr);
    const auto& params = run.out.at("params");
    ASSERT_EQ(params.size(), expected.size());
    for (size_t k = 0; k < params.size(); ++k) EXPECT_NEAR(params[k], expected[k], 1e-12) << "parameter " << k;
  }
}

TEST(Elastic, FitGoesOnUnchangedThroughALostMemberAndItsReplacement) {
  // Model::fit in a program that knows nothing of elasticity, under
  // multi_worker's two styles and zero's three stages: global batches of 8
  // (36 steps); a random slot (seed 11: rank 0) killed before a step's
  // collectives or after its gradient exchange (before the commit). Either
  // way the survivors redo that step as 2, and with a commit every 3 steps
  // (the horovod case; every 2 for zero stages 2 and 3) the steps since the
  // last commit too. The global batches do not depend
  // on the world, so the parameters and every epoch's loss equal one
  // process's fit on the same batches; the world sizes, kept in a
  // callback's committed state, show the change and the replacement.
  constexpr int64_t kFitBatch = 8;
  const char* phases[] = {"begin", "end"};
  struct Case {
    unsigned seed;
    const char* strategy;
    int64_t commit_steps;
  };
  // zero keeps no whole state anywhere: each commit is every rank's blocks
  // and a copy of its predecessor's; the survivors rebuild the blocks for 2
  // and read them back from those parts (seed 2: rank 0, whose part's copy
  // is on rank 1; seed 1: rank 1, holder of rank 0's copy; seed 9, stage 3:
  // rank 1, whose parameters between steps are only its blocks).
  for (const Case& c : {Case{11u, "multi_worker:style=ddp", 1}, Case{16u, "multi_worker:style=horovod", 3},
                        Case{2u, "zero:stage=1", 1}, Case{1u, "zero:stage=2", 2}, Case{9u, "zero:stage=3", 2}}) {
    const auto [seed, strategy, commit_steps] = c;
    std::mt19937 rng(seed);
    const int slot = int(rng() % 3);
    const int64_t step = 2 + int64_t(rng() % 6);
    const std::string phase = phases[rng() % 2];
    SCOPED_TRACE("seed " + std::to_string(seed) + ", " + strategy + ": slot " + std::to_string(slot) +
                 " killed at step " + std::to_string(step) + ", " + phase);
    TempDir dir("elastic_test");
    const std::string job = "elasticfit" + std::to_string(seed);
    const JobRun run = run_job(
        dir, job, {"--min-np", "2", "--max-restarts", "1"},
        {"--fit", "--strategy", strategy, "--tensorboard", dir / "tb", "--commit-steps", std::to_string(commit_steps),
         "--kill", std::to_string(slot) + ":" + std::to_string(step) + ":" + phase, "--step-delay-ms", "100"},
        kFitBatch);
    ASSERT_TRUE(run.result.finished);
    ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
    EXPECT_NE(run.result.err.find("(SIGKILL); starting slot " + std::to_string(slot) + " again"), std::string::npos)
        << run.result.err;
    const auto& sizes = run.out.at("sizes");
    ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / kFitBatch));
    const auto two = std::find(sizes.begin(), sizes.end(), 2.0);
    ASSERT_NE(two, sizes.end()) << "the survivors never trained as 2";
    // Commits follow steps c-1, 2c-1, ...: the survivors go on from the last.
    EXPECT_EQ(two - sizes.begin(), step / commit_steps * commit_steps);
    EXPECT_TRUE(std::all_of(sizes.begin(), two, [](double s) { return s == 3; }));
    EXPECT_EQ(sizes.back(), 3) << "the replacement never joined";
    expect_one_process_fit(run, kFitBatch);
    // TensorBoard: the steps the survivors redid (and, when the chief was
    // lost, the new chief's file) add no step twice and none goes back.
    std::map<std::string, std::vector<int64_t>> steps;
    for (const std::string& file : tfevents::list_event_files(dir / "tb/train")) {
      std::map<std::string, int64_t> last;
      for (const tfevents::ScalarEvent& e : tfevents::read_event_file(file).scalars) {
        if (last.count(e.tag)) {
          EXPECT_GT(e.step, last[e.tag]) << e.tag << " went back in " << file;
        }
        last[e.tag] = e.step;
        steps[e.tag].push_back(e.step);
      }
    }
    for (auto& [tag, s] : steps) std::sort(s.begin(), s.end());
    std::vector<int64_t> every_step(sizes.size()), every_epoch(static_cast<size_t>(kEpochs));
    std::iota(every_step.begin(), every_step.end(), 1);
    std::iota(every_epoch.begin(), every_epoch.end(), 0);
    EXPECT_EQ(steps["batch_loss"], every_step);
    EXPECT_EQ(steps["epoch_loss"], every_epoch);
  }
}

TEST(Elastic, FitOverAnInputPipelineGoesOnFromItsCursor) {
  // The rows come through cohort's input pipeline (PipelineInput), whose
  // cursor the commit carries: a seeded slot killed at a step's start or
  // end, and the survivors' pipelines are built again for a world of 2
  // from the commit's cursor, which deals the epoch's remaining positions
  // over 2 (then 3) ranks. Global batches of 12, a multiple of both worlds.
  constexpr int64_t kPipelineBatch = 12;
  std::mt19937 rng(4);
  const int slot = int(rng() % 3);
  const int64_t step = 2 + int64_t(rng() % 4);
  const std::string phase = rng() % 2 ? "end" : "begin";
  SCOPED_TRACE("slot " + std::to_string(slot) + " killed at step " + std::to_string(step) + ", " + phase);
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticpipeline", {"--min-np", "2", "--max-restarts", "1"},
                             {"--fit", "--input", "pipeline", "--kill",
                              std::to_string(slot) + ":" + std::to_string(step) + ":" + phase, "--step-delay-ms",
                              "100"},
                             kPipelineBatch);
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& sizes = run.out.at("sizes");
  ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / kPipelineBatch));
  EXPECT_EQ(std::find(sizes.begin(), sizes.end(), 2.0) - sizes.begin(), step);
  EXPECT_EQ(sizes.back(), 3) << "the replacement never joined";
  expect_one_process_fit(run, kPipelineBatch);
}

TEST(Elastic, APrivateFitRollsItsAccountantBackWithTheModel) {
  // DP-SGD over multi_worker (Poisson samples of expected size 8, noise
  // added by rank 0 alone, keyed by the step): rank 0 killed after step 5's
  // gradient exchange, before its commit. The survivors redo step 5 as 2
  // with the same sample and the same noise, and the step is counted once
  // by the accountant: parameters, losses, each row's count and epsilon
  // equal one process's run of the same program.
  TempDir reference_dir("elastic_test");
  const JobRun reference =
      run_job(reference_dir, "elasticprivate1", {}, {"--fit", "--private"}, 8, {}, /*np=*/1);
  ASSERT_EQ(reference.result.exit_code, 0) << reference.result.err;
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticprivate", {"--min-np", "2", "--max-restarts", "1"},
                             {"--fit", "--private", "--kill", "0:5:end", "--step-delay-ms", "100"}, 8);
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& sizes = run.out.at("sizes");
  ASSERT_EQ(sizes.size(), reference.out.at("sizes").size());
  EXPECT_EQ(std::find(sizes.begin(), sizes.end(), 2.0) - sizes.begin(), 5);
  EXPECT_EQ(sizes.back(), 3) << "the replacement never joined";
  for (const char* name : {"params", "losses"}) {
    const auto& got = run.out.at(name);
    const auto& want = reference.out.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-12) << name << " " << k;
  }
  // Poisson samples: each row as often as the one-process run sampled it.
  EXPECT_EQ(run.out.at("counts"), reference.out.at("counts"));
  // {epsilon, steps}: 3 epochs of round(96 / 8) steps, none counted twice.
  EXPECT_EQ(run.out.at("epsilon"), reference.out.at("epsilon"));
  EXPECT_EQ(run.out.at("epsilon").at(1), 36);
  // Split noise shares are keyed by rank and world size: a step redone in
  // another world would be a second release. fit() refuses it, saying why.
  TempDir split_dir("elastic_test");
  const JobRun split = run_job(split_dir, "elasticprivatesplit", {"--min-np", "2", "--max-restarts", "0"},
                               {"--fit", "--private", "--split-noise"}, 8);
  expect_job_fails_saying(split,
                          "cannot follow its membership changes (these can: multi_worker (always); "
                          "parameter_server (staleness=0, without backup_workers); zero (without "
                          "shard_group); privacy (over multi_worker, noise_share=designated, without "
                          "secure_noise))");
}

TEST(Elastic, ZeroLosesACommitOnlyWhenAPartAndItsCopyDieTogether) {
  // Slots 0 and 1 die at once: part 0 of every commit was on rank 0 and its
  // copy on rank 1. Slot 2, alone, holds parts 1 (a copy) and 2: the job
  // ends saying which commit lost parts, rather than training on from a
  // state that is not the commit's.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticzerolost", {"--min-np", "1", "--max-restarts", "0"},
                             {"--fit", "--strategy", "zero:stage=1", "--kill", "0:4:begin", "--kill", "1:4:begin",
                              "--step-delay-ms", "50"},
                             8);
  expect_job_fails_saying(run, "lost parts (the members holding a part and its copy died together); only 2 of its 3 "
                               "parts are left, and no older commit is whole");
}

TEST(Elastic, ZeroSurvivesASecondDeathBeforeItsNextCommit) {
  // zero:stage=1, a commit every 2 steps (after steps 1, 3, 5, ...). Slot 0
  // dies at step 4: the survivors restore the commit of step 3, after which
  // each holds all its parts (no commit of their own then); slot 1 dies at
  // step 5, before the next commit: slot 2 alone restores the same commit
  // again from what it holds, and the job trains on to one process's result.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticzerotwice", {"--min-np", "1", "--max-restarts", "0"},
                             {"--fit", "--strategy", "zero:stage=1", "--commit-steps", "2", "--kill", "0:4:begin",
                              "--kill", "1:5:begin", "--step-delay-ms", "50"},
                             8);
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  const auto& sizes = run.out.at("sizes");
  ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / 8));
  // Steps 0-3 at 3; step 4 (redone from the commit of step 3) at 2; step 4
  // again and on at 1 (the commit of step 3 again).
  EXPECT_EQ(std::vector<double>(sizes.begin(), sizes.begin() + 5), (std::vector<double>{3, 3, 3, 3, 1}));
  EXPECT_EQ(sizes.back(), 1);
  expect_one_process_fit(run, 8);
}

TEST(Elastic, AParameterServerFitRollsTheServersBackWithItsWorkers) {
  // fit() under parameter_server: 3 workers and the last slots serving, a
  // commit every 2 steps (after steps 1, 3, ...). At each of the workers'
  // commits every partition keeps its state as a commit (on its replica
  // too), and the survivors of a loss take the servers back to their
  // newest commit with them and redo the steps since, which the servers had
  // applied. Killed, in one job, the chief (slot 0, which names the workers
  // that go on) after step 3's exchange with the servers (the servers sum
  // gradients, the workers step SGD); in another, a server after step 4's
  // (the servers step SGD themselves, replicas=1): its partition is taken
  // over from the replica, whose commits followed the primary's, and its
  // slot's replacement serves nothing; the workers, waiting on the lost server,
  // give up with the world and roll back (unless the failover answered
  // them first: they then meet the new epoch at their next commit, or give
  // up with the world in a collective that the others left); and
  // then a worker at step 8's start, whose replacement finds the lost
  // server marked in the store and goes to the new owner at once. Each job
  // ends with one process's fit on the same global batches and every row
  // once an epoch; without the servers' rollback, a redone step
  // would be applied twice (or, when they only sum, be given the old step's
  // sum).
  constexpr int64_t kFitBatch = 8;
  struct Case {
    const char* strategy;
    int np;
    std::vector<std::string> kills;  // SLOT:STEP:PHASE[:BY]
    int64_t first_two;               // the first step at 2 workers
    bool server_lost;
    // elastic_program --hold-below: the survivors of a worker's loss wait
    // for its replacement's registration (the 36 steps could end before a
    // replacement started under load joined).
    const char* hold_below;
  };
  for (const Case& c : {Case{"parameter_server:servers=1", 4, {"0:3:end"}, 2, false, "3"},
                        Case{"parameter_server:servers=2,replicas=1,optimizer=sgd,lr=0.05,momentum=0.9",
                             5,
                             {"4:4:end:0", "1:8:begin"},
                             8,
                             true,
                             "3"}}) {
    SCOPED_TRACE(std::string(c.strategy) + ", kill " + c.kills.front());
    TempDir dir("elastic_test");
    const std::string job = "elasticps" + std::to_string(c.np);
    std::vector<std::string> args = {"--fit",           "--strategy", c.strategy,     "--commit-steps", "2",
                                     "--step-delay-ms", "50",         "--hold-below", c.hold_below};
    for (const std::string& k : c.kills) args.insert(args.end(), {"--kill", k});
    const JobRun run = run_job(dir, job,
                               {"--min-np", std::to_string(c.np - int(c.kills.size())), "--max-restarts", "1"}, args,
                               kFitBatch, {}, c.np);
    ASSERT_TRUE(run.result.finished) << run.result.err;
    ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
    for (const std::string& k : c.kills)
      EXPECT_NE(run.result.err.find("(SIGKILL); starting slot " + k.substr(0, k.find(':')) + " again"),
                std::string::npos)
          << run.result.err;
    const auto& sizes = run.out.at("sizes");
    ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / kFitBatch));
    // A server's loss leaves the workers 3: they roll back from the world's
    // abandonment, or, when the failover answered them first, meet the new
    // epoch at their next commit and restore that one.
    const auto two = std::find(sizes.begin(), sizes.end(), 2.0);
    ASSERT_NE(two, sizes.end()) << "the survivors never trained as 2";
    EXPECT_EQ(two - sizes.begin(), c.first_two);
    EXPECT_TRUE(std::all_of(sizes.begin(), two, [](double s) { return s == 3; }));
    EXPECT_EQ(sizes.back(), 3) << "the replacement never joined:\n" << run.result.err;
    if (c.server_lost) {
      EXPECT_NE(run.result.err.find("took over partition 1 of lost server 1 from its replica"), std::string::npos)
          << run.result.err;
    }
    expect_one_process_fit(run, kFitBatch);
  }
}

TEST(Elastic, AcrossHostsTheReplacementStartsOnItsSlotsHost) {
  // Two "hosts" (the launch template runs their ranks here through
  // cohortrun --remote-rank, as ssh would): 127.0.0.2 holds slots 0 and 1
  // (shm between them), 127.0.0.3 slot 2; the hierarchical backend joins them.
  // Slot 2 dies before step 4's collectives; its replacement is started
  // through the template for 127.0.0.3, with its elastic identity in the
  // payload, and the epochs record each member's host.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elastichosts",
                             {"-H", "127.0.0.2:2,127.0.0.3:1", "--launch-template", "env COHORT_TEST_HOST={host}",
                              "--store-addr", "127.0.0.1", "--min-np", "2", "--max-restarts", "1"},
                             {"--fit", "--kill", "2:4:begin", "--step-delay-ms", "100"}, 8);
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_NE(run.result.err.find("cohort: backend hierarchical"), std::string::npos) << run.result.err;
  EXPECT_NE(run.result.out.find("slot 2.1 joins on 127.0.0.3"), std::string::npos) << run.result.out;
  const auto& sizes = run.out.at("sizes");
  ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / 8));
  EXPECT_EQ(std::find(sizes.begin(), sizes.end(), 2.0) - sizes.begin(), 4);
  EXPECT_EQ(sizes.back(), 3) << "the replacement never joined";
  expect_one_process_fit(run, 8);
}

TEST(Elastic, HostDiscoveryRemovesAHostGracefullyAndAddsOne) {
  // The discovery script prints a file the program rewrites: after step 4
  // 127.0.0.3 is gone (its rank leaves at that step's commit, without
  // rollback), after step 10 127.0.0.4 appears (a new rank starts there and
  // joins at that step's commit). Members hold at those steps until the
  // launcher has published the change, so it lands exactly there.
  TempDir dir("elastic_test");
  const std::string hosts = dir / "hosts";
  std::ofstream(hosts) << "127.0.0.2:2\n127.0.0.3:1\n";
  const JobRun run =
      run_job(dir, "elasticdiscovery",
              {"--host-discovery-script", "cat " + hosts, "--launch-template", "env COHORT_TEST_HOST={host}",
               "--store-addr", "127.0.0.1", "--min-np", "2", "--max-np", "3", "--max-restarts", "1"},
              {"--fit", "--write", "4:" + hosts + ":127.0.0.2:2", "--hold", "4", "--write",
               "10:" + hosts + ":127.0.0.2:2,127.0.0.4:1", "--hold", "10"},
              8);
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_NE(
      run.result.err.find("host discovery: hosts now 127.0.0.2:2; host 127.0.0.3 lost slots: 2.0 leave(s) the job"),
      std::string::npos)
      << run.result.err;
  EXPECT_NE(run.result.err.find("host discovery: hosts now 127.0.0.2:2,127.0.0.4:1"), std::string::npos)
      << run.result.err;
  EXPECT_NE(run.result.out.find("slot 3.0 joins on 127.0.0.4"), std::string::npos) << run.result.out;
  EXPECT_EQ(run.result.err.find("from the last commit"), std::string::npos) << "a rollback: " << run.result.err;
  const auto& sizes = run.out.at("sizes");
  std::vector<double> expected_sizes(size_t(kEpochs * kRows / 8), 3.0);
  for (size_t k = 5; k <= 10; ++k) expected_sizes[k] = 2;
  EXPECT_EQ(sizes, expected_sizes);
  expect_one_process_fit(run, 8);
}

TEST(Elastic, ACutLinkIsTreatedLikeADeath) {
  // Two emulated hosts (network namespaces): h0 runs slots 0 and 1, h1 slot
  // 2. After step 4 the test cuts h1's link (its bridge port goes down:
  // packets vanish, no connection closes, as when a cable is pulled). Slot 2
  // is alive to its kernel and silent to everyone: its heartbeats stop, the
  // launcher kills it after COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S and announces
  // the loss, and the survivors abandon the collective they wait in with
  // it (instead of waiting COHORT_TIMEOUT_S, 300 s) and go on as 2 from
  // their last commit. No restart: h1 stays unreachable.
  if (const auto why = cluster_unavailable()) GTEST_SKIP() << *why;
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/cluster.sh up failed:\n" << cluster.output();
  TempDir dir("elastic_test");
  const std::string marker = dir / "cut";
  const std::string port = cluster.prefix() + "-v1";  // h1's port on the bridge (scripts/cluster.sh)
  std::atomic<bool> done{false}, cut{false};
  std::thread cutter([&] {
    while (!done && !std::filesystem::exists(marker)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done) return;
    const CommandResult r = run_command("ip link set dev " + port + " down");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    cut = true;
  });
  const JobRun run = run_job(
      dir, "elasticcut",
      {"-H", cluster.hosts()[0] + ":2," + cluster.hosts()[1] + ":1", "--launch-template", "ip netns exec {host}",
       "--store-addr", cluster.bridge_address(), "--min-np", "2", "--max-restarts", "0"},
      {"--fit", "--write", "4:" + marker + ":x", "--step-delay-ms", "100"}, 8,
      {{"COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S", "2"}});
  done = true;
  cutter.join();
  ASSERT_TRUE(cut) << "the link was never cut";
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_NE(run.result.err.find("rank 2.0 on " + cluster.hosts()[1] +
                                " sent no heartbeat for 2 s (a cut link or a hung host); killing it"),
            std::string::npos)
      << run.result.err;
  EXPECT_LT(run.result.seconds, 60) << "the survivors waited for their timeout";
  const auto& sizes = run.out.at("sizes");
  ASSERT_EQ(sizes.size(), size_t(kEpochs * kRows / 8));
  const auto two = std::find(sizes.begin(), sizes.end(), 2.0);
  ASSERT_NE(two, sizes.end()) << "the survivors never trained as 2";
  // Steps 0-3 were committed as 3; step 4's commit may have met the cut.
  EXPECT_GE(two - sizes.begin(), 4);
  EXPECT_NE(run.result.err.find("was abandoned: member 2.0 of elastic epoch 0 was lost"), std::string::npos)
      << run.result.err;
  EXPECT_TRUE(std::all_of(sizes.begin(), two, [](double s) { return s == 3; }));
  EXPECT_TRUE(std::all_of(two, sizes.end(), [](double s) { return s == 2; }));
  expect_one_process_fit(run, 8);
}

TEST(Elastic, AMemberLostWhileTheOthersFormANewWorldIsLeftBehind) {
  // Slot 1 dies before step 4's collectives; slot 2 stalls in that step
  // for 1 s and dies too. Slot 0 meanwhile forms epoch 1 with slot 2, which
  // never comes: when the launcher publishes epoch 2 (slot 0 alone), the
  // rendezvous gives way to it at once (not after COHORT_TIMEOUT_S), and
  // slot 0 trains alone until the replacements join.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elastictwice", {"--min-np", "1", "--max-restarts", "1"},
                             {"--kill", "1:4:before", "--kill", "2:4:late", "--step-delay-ms", "100"});
  ASSERT_TRUE(run.result.finished);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.err;
  EXPECT_LT(run.result.seconds, 60);
  EXPECT_NE(run.result.err.find("elastic epoch 1 was superseded while its world formed"), std::string::npos)
      << run.result.err;
  const auto& sizes = run.out.at("sizes");
  ASSERT_GT(sizes.size(), 5u);
  EXPECT_EQ(sizes[3], 3);
  EXPECT_EQ(sizes[4], 1);  // slot 0 alone redid step 4
  EXPECT_EQ(sizes.back(), 3) << "the replacements never joined";
  const std::vector<double> expected = reference(run.out.at("initial"), sizes, false);
  const auto& params = run.out.at("params");
  ASSERT_EQ(params.size(), expected.size());
  for (size_t k = 0; k < params.size(); ++k) EXPECT_NEAR(params[k], expected[k], 1e-12) << "parameter " << k;
}

TEST(Elastic, BelowMinNpForTheTimeoutEndsTheJobSayingSo) {
  // The replacement never becomes ready: 2 of --min-np 3 for 1 s.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticmin", {"--min-np", "3", "--max-restarts", "1", "--elastic-timeout", "1"},
                             {"--kill", "1:3:before", "--step-delay-ms", "20", "--replacement-stalls"});
  ASSERT_TRUE(run.result.finished);
  EXPECT_EQ(run.result.exit_code, 1);
  EXPECT_NE(run.result.err.find("the job stayed below --min-np 3 (2 rank(s) live) for --elastic-timeout 1 s"),
            std::string::npos)
      << run.result.err;
  EXPECT_LT(run.result.seconds, 60);
}

TEST(Elastic, AFloorThatCannotBeReachedAgainFailsAtOnce) {
  // No restart left: 2 ranks can never be 3 again.
  TempDir dir("elastic_test");
  const JobRun run = run_job(dir, "elasticfloor", {"--min-np", "3", "--max-restarts", "0"},
                             {"--kill", "1:3:before", "--step-delay-ms", "20"});
  ASSERT_TRUE(run.result.finished);
  EXPECT_EQ(run.result.exit_code, 128 + SIGKILL) << run.result.err;
  EXPECT_NE(run.result.err.find("below --min-np 3 for good; the job cannot go on"), std::string::npos)
      << run.result.err;
}

}  // namespace
}  // namespace cohort::testing::elastic_test
