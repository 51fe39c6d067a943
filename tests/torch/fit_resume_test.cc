// fit()'s fault tolerance with real processes under cohortrun
// (fit_resume_program): a job killed with SIGKILL at a random step (every
// process of it) and launched again resumes from BackupAndRestore and ends
// with the same parameters, bit for bit, as a job that was never stopped
// (under DDP, Horovod-style, and zero stage 3 with sharded backups);
// a job sent SIGTERM agrees on a step, backs up, exits with
// kPreemptedExitCode, and the next launch finishes it, again bit for bit.
// TensorBoard's files through a kill and a resume: one run from the
// chief only, readable after the kill, every step once after the resume.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include "cohort/tensorboard/event_file_name.h"
#include "cohort/tensorboard/event_file_reader.h"
#include "tests/launcher/cohortrun_process.h"

namespace cohort::testing::fit_resume_test {
namespace {

using launcher::testing::CohortrunProcess;
using launcher::testing::read_text;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

const std::string kCohortrun = std::string(COHORT_BINARY_DIR) + "/cohort/launcher/cohortrun";
const std::string kProgram = std::string(COHORT_BINARY_DIR) + "/tests/torch/fit_resume_program";
// 45 rows in batches of 6: 8 steps an epoch, 4 epochs.
constexpr int kSteps = 32;

std::vector<std::string> job_args(const std::string& dir, const std::string& backup, const std::string& out,
                                  const std::string& style, std::vector<std::string> extra = {}) {
  // A spec with options ("zero:stage=3") is a whole strategy.
  std::vector<std::string> args = {"-np", "2", kProgram, "--backup", dir + "/" + backup, "--out", dir + "/" + out,
                                    style.find(':') == std::string::npos ? "--style" : "--strategy", style};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The history CSV's cells as numbers (header dropped), row by row.
// The step accounting's columns (slowest_rank, slowest_rank_share) are
// timings, not training state: left out.
std::vector<std::vector<double>> history_cells(const std::string& csv) {
  std::vector<std::vector<double>> rows;
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);  // header
  std::vector<bool> timing;
  {
    std::istringstream names(line);
    for (std::string name; std::getline(names, name, ',');) timing.push_back(name.starts_with("slowest_rank"));
  }
  while (std::getline(lines, line)) {
    std::vector<double> row;
    std::istringstream cells(line);
    std::string cell;
    for (size_t c = 0; std::getline(cells, cell, ','); ++c)
      if (c >= timing.size() || !timing[c]) row.push_back(cell.empty() ? std::nan("") : std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

// Every epoch's merged training loss and accuracy equal the uninterrupted
// run's: the interrupted epoch's partial metrics were carried over exactly
// once. (The CSV has 9 significant digits; the float64 sums across processes
// may add in another order after a resume, which can move the last digit.
// Counting a partial epoch twice moves the loss by whole percents.)
void expect_same_history(const std::string& resumed_csv, const std::string& uninterrupted_csv) {
  const auto a = history_cells(resumed_csv), b = history_cells(uninterrupted_csv);
  ASSERT_EQ(a.size(), b.size()) << resumed_csv << "\nvs\n" << uninterrupted_csv;
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size());
    for (size_t c = 0; c < a[r].size(); ++c)
      EXPECT_NEAR(a[r][c], b[r][c], 2e-8 * std::max(1.0, std::abs(b[r][c])))
          << "epoch row " << r + 1 << ", column " << c << "\n" << resumed_csv << "\nvs\n" << uninterrupted_csv;
  }
}

// A directory of its own for one launch's output files.
std::string launch_dir(const std::string& dir, const std::string& name) {
  std::filesystem::create_directories(dir + "/" + name);
  return dir + "/" + name;
}

// The job's output, stdout then stderr (cohort's log lines are on stderr).
std::string run_to_end(const std::string& dir, const std::vector<std::string>& args) {
  CohortrunProcess p(kCohortrun, args, dir);
  const RunResult r = p.wait(std::chrono::seconds(120));
  EXPECT_TRUE(r.finished && r.exit_code == 0) << "exit " << r.exit_code << "\n" << r.out << r.err;
  return r.out + r.err;
}

// Waits until the job printed "step <step>" (the backup of that step is
// written), or it ended.
bool wait_for_step(CohortrunProcess& p, const std::string& dir, int step) {
  const std::regex line("\\] step " + std::to_string(step) + "\\b");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && p.running()) {
    if (std::regex_search(read_text(dir + "/cohortrun.out"), line)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// The saved parameters as numbers, for a readable failure.
std::vector<double> parameters(const std::string& bytes) {
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

std::vector<pid_t> rank_pids(const std::string& out) {
  std::vector<pid_t> pids;
  const std::regex re("\\] pid ([0-9]+)");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    pids.push_back(pid_t(std::stol((*it)[1])));
  return pids;
}

// Runs the job in `dir` until its chief printed step `step` (the ranks hang
// there: --hang-at), then SIGKILLs the whole job, the launcher and every
// rank at once.
void kill_job_at_step(const std::string& dir, const std::vector<std::string>& args, int step) {
  CohortrunProcess p(kCohortrun, args, dir);
  ASSERT_TRUE(wait_for_step(p, dir, step)) << read_text(dir + "/cohortrun.out");
  const std::vector<pid_t> pids = rank_pids(read_text(dir + "/cohortrun.out"));
  ASSERT_EQ(pids.size(), 2u);
  p.signal(SIGKILL);
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  p.wait(std::chrono::seconds(10));
}

class FitResume : public ::testing::TestWithParam<std::string> {};

TEST_P(FitResume, KilledAtARandomStepThenResumedEqualsAnUninterruptedRun) {
  const std::string style = GetParam();
  TempDir dir;
  run_to_end(launch_dir(dir.path(), "a"), job_args(dir.path(), "backup_a", "a.bin", style));
  const std::string uninterrupted = read_text(dir.path() + "/a.bin");
  ASSERT_FALSE(uninterrupted.empty());

  std::mt19937 rng(style == "ddp" ? 17 : 23);  // fixed seeds: the same kill points every run
  const int kill_at = 2 + int(rng() % (kSteps - 4));
  {
    // The ranks stop after step kill_at's backup, so that the kill lands
    // there and not after the job has finished.
    ASSERT_NO_FATAL_FAILURE(kill_job_at_step(
        launch_dir(dir.path(), "b1"),
        job_args(dir.path(), "backup_b", "b.bin", style, {"--hang-at", std::to_string(kill_at)}), kill_at));
  }
  const std::string out = run_to_end(launch_dir(dir.path(), "b2"), job_args(dir.path(), "backup_b", "b.bin", style));
  EXPECT_NE(out.find("BackupAndRestore: resuming from"), std::string::npos) << out;
  EXPECT_EQ(parameters(read_text(dir.path() + "/b.bin")), parameters(uninterrupted))
      << "killed after step " << kill_at << ": the resumed run's parameters differ";
  expect_same_history(read_text(dir.path() + "/b.bin.csv"), read_text(dir.path() + "/a.bin.csv"));
}

TEST_P(FitResume, SigtermBacksUpExitsPreemptedAndTheNextLaunchFinishes) {
  const std::string style = GetParam();
  TempDir dir;
  run_to_end(launch_dir(dir.path(), "a"), job_args(dir.path(), "backup_a", "a.bin", style));
  const std::string uninterrupted = read_text(dir.path() + "/a.bin");

  {
    // Slow steps, so that the signal arrives while the job runs.
    const std::string out_dir = launch_dir(dir.path(), "b1");
    CohortrunProcess p(kCohortrun, job_args(dir.path(), "backup_b", "b.bin", style, {"--step-delay-ms", "100"}),
                       out_dir);
    ASSERT_TRUE(wait_for_step(p, out_dir, 11)) << read_text(out_dir + "/cohortrun.out");
    p.signal(SIGTERM);
    const RunResult r = p.wait(std::chrono::seconds(60));
    ASSERT_TRUE(r.finished) << r.out << r.err;
    // Every rank exits with 75; so does cohortrun.
    EXPECT_EQ(r.exit_code, 75) << r.out << r.err;
    EXPECT_FALSE(std::regex_search(r.out, std::regex("\\] step " + std::to_string(kSteps) + "\\b")))
        << "the job ran to its end instead of stopping";
  }
  const std::string out = run_to_end(launch_dir(dir.path(), "b2"), job_args(dir.path(), "backup_b", "b.bin", style));
  EXPECT_NE(out.find("BackupAndRestore: resuming from"), std::string::npos) << out;
  EXPECT_EQ(parameters(read_text(dir.path() + "/b.bin")), parameters(uninterrupted));
  expect_same_history(read_text(dir.path() + "/b.bin.csv"), read_text(dir.path() + "/a.bin.csv"));
}

// A TensorBoard run's scalars, its files in the order they were started:
// tag -> (step, value) in the order a reader plotting them meets them.
std::map<std::string, std::vector<std::pair<int64_t, double>>> tensorboard_run(const std::string& dir) {
  std::vector<tfevents::EventFile> files;
  for (const std::string& path : tfevents::list_event_files(dir)) files.push_back(tfevents::read_event_file(path));
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.start_wall_time < b.start_wall_time; });
  std::map<std::string, std::vector<std::pair<int64_t, double>>> run;
  for (const auto& f : files) {
    EXPECT_EQ(f.file_version, "brain.Event:2");
    for (const auto& s : f.scalars) run[s.tag].emplace_back(s.step, s.value);
  }
  return run;
}

std::vector<int64_t> steps_of(const std::vector<std::pair<int64_t, double>>& points) {
  std::vector<int64_t> steps;
  for (const auto& [step, value] : points) steps.push_back(step);
  return steps;
}

std::vector<int64_t> range(int64_t from, int64_t to) {  // [from, to]
  std::vector<int64_t> v;
  for (int64_t i = from; i <= to; ++i) v.push_back(i);
  return v;
}

// Two ranks: only the chief writes (one file, no other). Killed at step 11
// (backed up every 4 steps: the resume redoes steps 9-11, whose batch
// scalars were flushed): the files read whole, with the steps flushed before
// the kill. Resumed: every tag's steps once each, in order; the epoch
// scalars equal the uninterrupted run's History (float32).
TEST(FitTensorBoard, OneRunFromTheChiefReadableAfterAKillEveryStepOnceAfterTheResume) {
  TempDir dir;
  const std::vector<std::string> tb_a = {"--tensorboard", dir.path() + "/tb_a", "--backup-every", "4"};
  const std::string out_a =
      run_to_end(launch_dir(dir.path(), "a"), job_args(dir.path(), "backup_a", "a.bin", "ddp", tb_a));
  const std::vector<pid_t> pids_a = rank_pids(out_a);
  ASSERT_EQ(pids_a.size(), 2u);
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/tb_a"))
    entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{"train"}) << "no validation data: one run";
  const auto files_a = tfevents::list_event_files(dir.path() + "/tb_a/train");
  ASSERT_EQ(files_a.size(), 1u) << "one file, the chief's";
  const auto a = tensorboard_run(dir.path() + "/tb_a/train");
  const std::string csv = read_text(dir.path() + "/a.bin.csv");
  const auto history = history_cells(csv);
  ASSERT_EQ(history.size(), 4u);
  std::istringstream header(csv.substr(0, csv.find('\n')));
  std::string column;
  std::getline(header, column, ',');  // epoch
  for (size_t c = 1; std::getline(header, column, ',');) {
    // Every History key as epoch_<key>, at steps 0-3; the CSV's 9 digits
    // then float32 agree within float32's rounding (history_cells() leaves
    // the timing columns out: their tags are only checked to be there).
    ASSERT_TRUE(a.count("epoch_" + column)) << column;
    const auto& points = a.at("epoch_" + column);
    ASSERT_EQ(steps_of(points), range(0, 3)) << column;
    if (column.starts_with("slowest_rank")) continue;
    for (size_t e = 0; e < 4; ++e)
      EXPECT_NEAR(points[e].second, history[e][c], 1.2e-7 * std::abs(history[e][c])) << column << " epoch " << e;
    ++c;
  }
  // Every rank's step accounting, per epoch.
  for (const char* tag : {"rank_0/step_time_ms", "rank_1/compute_ms", "rank_1/peer_wait_ms"})
    EXPECT_EQ(steps_of(a.at(tag)), range(0, 3)) << tag;
  EXPECT_EQ(steps_of(a.at("batch_loss")), range(1, kSteps));

  const int kill_at = 11;
  const std::string tb_b = dir.path() + "/tb_b";
  const std::vector<std::string> flags_b = {"--tensorboard", tb_b, "--backup-every", "4"};
  {
    const std::string out_dir = launch_dir(dir.path(), "b1");
    std::vector<std::string> hang = flags_b;
    hang.insert(hang.end(), {"--hang-at", std::to_string(kill_at)});
    ASSERT_NO_FATAL_FAILURE(kill_job_at_step(out_dir, job_args(dir.path(), "backup_b", "b.bin", "ddp", hang), kill_at));
  }
  const auto killed = tensorboard_run(tb_b + "/train");
  EXPECT_EQ(steps_of(killed.at("batch_loss")), range(1, kill_at));
  EXPECT_EQ(steps_of(killed.at("epoch_loss")), range(0, 0));

  const std::string out =
      run_to_end(launch_dir(dir.path(), "b2"), job_args(dir.path(), "backup_b", "b.bin", "ddp", flags_b));
  ASSERT_NE(out.find("BackupAndRestore: resuming from"), std::string::npos) << out;
  EXPECT_EQ(tfevents::list_event_files(tb_b + "/train").size(), 2u) << "the killed chief's and the resumed chief's";
  const auto b = tensorboard_run(tb_b + "/train");
  EXPECT_EQ(b.size(), a.size());
  for (const auto& [tag, points] : a) {
    ASSERT_TRUE(b.count(tag)) << tag;
    EXPECT_EQ(steps_of(b.at(tag)), steps_of(points)) << tag << ": steps repeated, missing or out of order";
  }
  for (const char* tag : {"epoch_loss", "epoch_accuracy", "epoch_learning_rate"})
    for (size_t e = 0; e < 4; ++e)
      EXPECT_NEAR(b.at(tag)[e].second, a.at(tag)[e].second, 2e-7 * std::abs(a.at(tag)[e].second)) << tag << e;
}

// zero:stage=3: the backup's model and optimizer state are sharded, each
// process writing its own blocks (BackupAndRestore's backup.shards).
INSTANTIATE_TEST_SUITE_P(Styles, FitResume, ::testing::Values("ddp", "horovod", "zero:stage=3"));

}  // namespace
}  // namespace cohort::testing::fit_resume_test
