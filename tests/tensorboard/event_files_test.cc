// TensorBoard event files (cohort/tensorboard): the writer's files read back
// whole, cut at every byte (a writer killed mid-record) and killed after a
// flush; damage refused; a run's writer never writing a step twice; and
// against an independent implementation (tfevents_peer.py): its
// python3-protobuf reader parses our files, our reader parses its
// hand-encoded fixture (committed, and checked equal to what the peer
// makes).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "cohort/common/network_interface.h"
#include "cohort/data/record_format.h"
#include "cohort/tensorboard/event_file_name.h"
#include "cohort/tensorboard/event_file_reader.h"
#include "cohort/tensorboard/event_file_writer.h"
#include "cohort/tensorboard/run_writer.h"
#include "tests/data/temp_dir.h"

namespace cohort::tfevents {
namespace {

using cohort::testing::slurp;
using cohort::testing::spit;
using cohort::testing::TempDir;

std::string only_file(const std::string& dir) {
  const auto files = list_event_files(dir);
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? "" : files[0];
}

// The byte offsets where the records of `bytes` end (whole frames).
std::vector<size_t> record_ends(const std::vector<uint8_t>& bytes) {
  std::vector<size_t> ends;
  size_t at = 0;
  while (at + data::kRecordHeaderBytes <= bytes.size()) {
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t(bytes[at + size_t(i)]) << (8 * i);
    at += data::kRecordOverheadBytes + length;
    ends.push_back(at);
  }
  return ends;
}

TEST(EventFiles, WrittenScalarsReadBackAsFloat32) {
  TempDir dir;
  {
    EventFileWriter w(dir.path() + "/train");
    for (int i = 0; i < 5; ++i) w.add_scalar("epoch_loss", i, 1.0f / float(i + 3), 1e9 + i);
    w.add_scalar("batch_accuracy", int64_t(1) << 40, -0.1f, 2e9);
  }
  const std::string path = only_file(dir.path() + "/train");
  EXPECT_TRUE(std::regex_match(std::filesystem::path(path).filename().string(),
                               std::regex("events\\.out\\.tfevents\\.[0-9]+\\." + net::host_name() + "\\." +
                                          std::to_string(::getpid()) + "\\.[0-9]+\\.v2")))
      << path;
  const EventFile f = read_event_file(path);
  EXPECT_EQ(f.file_version, "brain.Event:2");
  EXPECT_FALSE(f.truncated_tail);
  EXPECT_EQ(f.records, 7u);
  ASSERT_EQ(f.scalars.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(f.scalars[size_t(i)].tag, "epoch_loss");
    EXPECT_EQ(f.scalars[size_t(i)].step, i);
    EXPECT_EQ(f.scalars[size_t(i)].value, double(1.0f / float(i + 3)));
    EXPECT_EQ(f.scalars[size_t(i)].wall_time, 1e9 + i);
  }
  EXPECT_EQ(f.scalars[5].step, int64_t(1) << 40);
  EXPECT_EQ(f.scalars[5].value, double(-0.1f));
}

// Any prefix of a file (a writer killed mid-write) reads as the whole
// records it holds, its tail flagged, never an error.
TEST(EventFiles, EveryCutReadsTheWholeRecordsBeforeIt) {
  TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path());
    for (int i = 0; i < 4; ++i) w.add_scalar("epoch_loss", i, float(i), 1.0);
    path = w.path();
  }
  const std::vector<uint8_t> bytes = slurp(path);
  const std::vector<size_t> ends = record_ends(bytes);
  ASSERT_EQ(ends.size(), 5u);
  ASSERT_EQ(ends.back(), bytes.size());
  const std::string cut = dir.file("cut.tfevents.x");
  for (size_t n = 0; n <= bytes.size(); ++n) {
    spit(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)));
    const EventFile f = read_event_file(cut);
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= n) ++whole;
    ASSERT_EQ(f.records, whole) << "cut at " << n;
    EXPECT_EQ(f.valid_bytes, whole ? ends[whole - 1] : 0) << n;
    EXPECT_EQ(f.truncated_tail, f.valid_bytes != n) << n;
    EXPECT_EQ(f.scalars.size(), whole ? whole - 1 : 0) << n;
  }
}

TEST(EventFiles, DamageInsideTheFileIsCorruptNotATail) {
  TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir.path());
    for (int i = 0; i < 3; ++i) w.add_scalar("epoch_loss", i, float(i), 1.0);
    path = w.path();
  }
  const std::vector<uint8_t> good = slurp(path);
  const std::vector<size_t> ends = record_ends(good);
  // A byte of the second scalar's data, then of its length.
  for (size_t at : {ends[1] + data::kRecordHeaderBytes + 3, ends[1] + 1}) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 0x40;
    spit(path, bad);
    const std::string error = cohort::testing::error_of<data::CorruptRecordError>([&] { read_event_file(path); });
    EXPECT_NE(error.find("corrupt record at byte offset " + std::to_string(ends[1])), std::string::npos) << error;
  }
}

// A process killed after a flush: the flushed records are whole and read,
// what it buffered since is gone, nothing is damaged.
TEST(EventFiles, AKilledWriterLeavesItsFlushedRecords) {
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    EventFileWriter w(dir.path());
    for (int i = 0; i < 5; ++i) w.add_scalar("batch_loss", i, float(i), 1.0);
    w.flush();
    for (int i = 5; i < 8; ++i) w.add_scalar("batch_loss", i, float(i), 1.0);
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const EventFile f = read_event_file(only_file(dir.path()));
  EXPECT_FALSE(f.truncated_tail);
  ASSERT_EQ(f.scalars.size(), 5u);
  EXPECT_EQ(f.scalars.back().step, 4);
}

// All scalars of a run directory, per tag, in file order.
std::map<std::string, std::vector<int64_t>> steps_by_tag(const std::string& dir) {
  std::map<std::string, std::vector<int64_t>> steps;
  for (const std::string& path : list_event_files(dir))
    for (const ScalarEvent& s : read_event_file(path).scalars) steps[s.tag].push_back(s.step);
  return steps;
}

// A job that redoes steps (resumed from an older backup, an elastic
// rollback, another process as the new chief) adds only steps beyond the
// run's: each tag's steps increase strictly across the run's files.
TEST(RunWriter, RedoneStepsAreNotWrittenAgain) {
  TempDir dir;
  const std::string run = dir.path() + "/train";
  {
    RunWriter first(run);
    for (int64_t s = 0; s < 5; ++s) EXPECT_TRUE(first.add_scalar("batch_loss", s, double(s)));
    EXPECT_FALSE(first.add_scalar("batch_loss", 3, 0.0));  // within one writer too
    first.flush();
  }
  RunWriter second(run);  // reads the run's file
  EXPECT_EQ(second.last_step("batch_loss"), 4);
  EXPECT_EQ(second.last_step("epoch_loss"), -1);
  for (int64_t s = 2; s < 5; ++s) EXPECT_FALSE(second.add_scalar("batch_loss", s, -1.0)) << s;
  for (int64_t s = 5; s < 7; ++s) EXPECT_TRUE(second.add_scalar("batch_loss", s, double(s)));
  EXPECT_TRUE(second.add_scalar("epoch_loss", 0, 1.0));
  second.flush();
  const auto steps = steps_by_tag(run);
  EXPECT_EQ(steps.at("batch_loss"), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(steps.at("epoch_loss"), (std::vector<int64_t>{0}));
  EXPECT_EQ(list_event_files(run).size(), 2u);

  RunWriter unused(dir.path() + "/validation");
  unused.flush();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/validation")) << "a run with no scalars made a directory";
}

std::string run_peer(const std::string& python, const std::string& args, int& status) {
  const std::string line = python + " " + COHORT_SOURCE_DIR + "/tests/tensorboard/tfevents_peer.py " + args;
  FILE* p = ::popen(line.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int raw = p ? ::pclose(p) : -1;
  status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

// Our files, parsed by python3-protobuf (message classes from the peer's
// own descriptor) after its own CRC checks: every scalar, in order.
TEST(Peer, ReadsOurFiles) {
  TempDir dir;
  std::ostringstream expected;
  for (const char* run : {"train", "validation"}) {
    for (int file = 0; file < 2; ++file) {
      RunWriter w(dir.path() + "/" + run);
      for (int64_t s = file * 3; s < file * 3 + 3; ++s) {
        const double value = 0.1 * double(s) - (run[0] == 'v' ? 1.0 : 0.0);
        w.add_scalar("epoch_loss", s, value);
        char repr[64];
        std::snprintf(repr, sizeof repr, "%.17g", double(float(value)));
        expected << run << "\tepoch_loss\t" << s << "\t" << std::stod(repr) << "\n";
      }
      w.flush();
    }
  }
  int status;
  const std::string out =
      run_peer(COHORT_PROTOBUF_PYTHON, "read " + dir.path() + "/train " + dir.path() + "/validation", status);
  ASSERT_EQ(status, 0) << "the peer needs python3-protobuf for " << COHORT_PROTOBUF_PYTHON
                       << " (scripts/bootstrap.sh installs it)\n"
                       << out;
  // The peer prints Python's repr(); compare the numbers, not their spelling.
  std::istringstream got(out), want(expected.str());
  std::string got_line, want_line;
  int lines = 0;
  while (std::getline(want, want_line)) {
    ASSERT_TRUE(std::getline(got, got_line)) << "the peer read fewer scalars:\n" << out;
    std::istringstream g(got_line), w(want_line);
    std::string g_run, g_tag, w_run, w_tag;
    int64_t g_step, w_step;
    double g_value, w_value;
    g >> g_run >> g_tag >> g_step >> g_value;
    w >> w_run >> w_tag >> w_step >> w_value;
    EXPECT_EQ(g_run, w_run);
    EXPECT_EQ(g_tag, w_tag);
    EXPECT_EQ(g_step, w_step);
    EXPECT_EQ(float(g_value), float(w_value)) << got_line;
    ++lines;
  }
  EXPECT_EQ(lines, 12);
  EXPECT_FALSE(std::getline(got, got_line)) << "the peer read more scalars:\n" << out;

  // The peer's checks are real: a damaged byte fails it.
  const std::string path = list_event_files(dir.path() + "/train")[0];
  std::vector<uint8_t> bytes = slurp(path);
  bytes[bytes.size() - 6] ^= 1;
  spit(path, bytes);
  run_peer(COHORT_PROTOBUF_PYTHON, "read " + dir.path() + "/train 2>/dev/null", status);
  EXPECT_EQ(status, 1);
}

// A file another writer made (the peer's hand-encoded fixture: simple
// values, TF 2's tensor scalars, images, session logs and graphs to skip, a
// truncated tail), committed; it must equal what the peer makes.
TEST(Peer, FixtureReadsHere) {
  const std::string fixture = std::string(COHORT_SOURCE_DIR) + "/tests/tensorboard/fixture.tfevents";
  int status;
  const std::string out = run_peer(COHORT_PYTHON, "check-fixture " + fixture + " 2>&1", status);
  EXPECT_EQ(status, 0) << out;

  const EventFile f = read_event_file(fixture);
  EXPECT_EQ(f.file_version, "brain.Event:2");
  EXPECT_EQ(f.start_wall_time, 1700000000.5);
  EXPECT_EQ(f.records, 9u);
  EXPECT_TRUE(f.truncated_tail);
  EXPECT_EQ(f.valid_bytes + 20, slurp(fixture).size());
  const std::vector<std::tuple<std::string, int64_t, double>> expected = {
      {"epoch_loss", 0, 0.75}, {"epoch_loss", 1, 0.5}, {"epoch_accuracy", 1, 0.875},
      {"epoch_loss", 2, 0.25}, {"epoch_mae", 3, 0.1},  {"batch_loss", int64_t(1) << 40, -2.5}};
  ASSERT_EQ(f.scalars.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f.scalars[i].tag, std::get<0>(expected[i])) << i;
    EXPECT_EQ(f.scalars[i].step, std::get<1>(expected[i])) << i;
    EXPECT_EQ(f.scalars[i].value, std::get<2>(expected[i])) << i;  // all exact in float32 but 0.1, a double
  }
  EXPECT_EQ(f.scalars[1].wall_time, 1700000002.0);
}

}  // namespace
}  // namespace cohort::tfevents
