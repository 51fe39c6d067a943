// AtomicFile: the content appears whole at commit() or not at all; a failed
// or abandoned write leaves the old file and no temporary; errors are
// ConfigErrors naming the path; both durabilities give the same files.
#include "cohort/common/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cohort/common/error.h"
#include "tests/data/temp_dir.h"

namespace cohort::atomic_file_test {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::TempDir;

// The names in `dir`, sorted.
std::vector<std::string> names_in(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const std::string& path) {
  const std::vector<uint8_t> bytes = testing::slurp(path);
  return std::string(bytes.begin(), bytes.end());
}

void spit(const std::string& path, const std::string& text) { testing::spit(path, {text.begin(), text.end()}); }

class AtomicFileTest : public ::testing::TestWithParam<Durability> {
 protected:
  AtomicFileOptions options(size_t buffer_bytes = size_t(64) << 10) const {
    return {.durability = GetParam(), .buffer_bytes = buffer_bytes};
  }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Durabilities, AtomicFileTest,
                         ::testing::Values(Durability::none, Durability::fsync_file_and_dir),
                         [](const auto& info) { return info.param == Durability::none ? "none" : "fsync"; });

TEST_P(AtomicFileTest, ContentAppearsWholeAtCommitAndNotBefore) {
  const std::string path = dir_.file("out.bin");
  spit(path, "old contents");
  // A 16-byte buffer: small writes are gathered, large ones go straight out.
  AtomicFile file(path, options(16));
  std::string expected;
  for (int i = 0; i < 50; ++i) {
    const std::string piece(size_t(i % 7 == 0 ? 100 : i % 5 + 1), char('a' + i % 26));
    file.write(piece);
    expected += piece;
  }
  EXPECT_EQ(file.size(), expected.size());
  EXPECT_EQ(slurp(path), "old contents");  // readers still see the old file
  EXPECT_TRUE(fs::exists(file.temporary_path()));
  EXPECT_EQ(fs::path(file.temporary_path()).parent_path(), fs::path(dir_.path()));
  file.commit();
  EXPECT_EQ(slurp(path), expected);
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"out.bin"});  // no temporary left
}

TEST_P(AtomicFileTest, AbandonedWriterLeavesTheOldFileAndNoTemporary) {
  const std::string path = dir_.file("state.json");
  spit(path, "{\"step\": 1}");
  {
    AtomicFile file(path, options());
    file.write(std::string(200000, 'x'));  // partly on disk already
  }
  EXPECT_EQ(slurp(path), "{\"step\": 1}");
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"state.json"});
  {
    AtomicFile file(dir_.file("new.json"), options());
    file.write("never committed");
  }
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"state.json"});
}

TEST_P(AtomicFileTest, FailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string path = dir_.file("shard.rec");
  const std::string old(300, 'o');
  spit(path, old);
  // A file-size limit makes write(2) fail with EFBIG, as a full disk would
  // with ENOSPC; SIGXFSZ ignored so that the failure is a return value.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore = {};
  struct sigaction previous = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  AtomicFile file(path, options(1024));
  std::string what = error_of<ConfigError>([&] {
    for (int i = 0; i < 100; ++i) file.write(std::string(1000, 'n'));
  });
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &previous, nullptr), 0);
  EXPECT_NE(what.find("cannot write " + path), std::string::npos) << what;
  EXPECT_NE(what.find(std::strerror(EFBIG)), std::string::npos) << what;
  EXPECT_EQ(slurp(path), old);
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"shard.rec"});
  // The writer is done: committing what failed is a programming error.
  EXPECT_THROW(file.commit(), Error);
  EXPECT_EQ(slurp(path), old);
}

TEST_P(AtomicFileTest, WriteAtFillsInAHeaderWrittenFirst) {
  const std::string path = dir_.file("checkpoint");
  AtomicFile file(path, options(8));
  file.write(std::string(8, '\0'));  // placeholder
  file.write("payload of some length");
  file.write_at(0, "HEADER!!", 8);
  file.write_at(11, "P", 1);
  EXPECT_THROW(file.write_at(file.size() - 2, "abc", 3), Error);  // past the end
  file.commit();
  EXPECT_EQ(slurp(path), "HEADER!!payPoad of some length");
}

TEST_P(AtomicFileTest, KeepsTheReplacedFileWhenAsked) {
  const std::string path = dir_.file("model.ckpt"), previous = dir_.file("model.ckpt.prev");
  {
    AtomicFile first(path, options());
    first.write("first");
    first.commit(previous);  // nothing to keep yet
  }
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"model.ckpt"});
  AtomicFile second(path, options());
  second.write("second");
  second.commit(previous);
  EXPECT_EQ(slurp(path), "second");
  EXPECT_EQ(slurp(previous), "first");
  EXPECT_EQ(names_in(dir_), (std::vector<std::string>{"model.ckpt", "model.ckpt.prev"}));
}

TEST_P(AtomicFileTest, WriteFileAtomicallyUsesTheModeGiven) {
  const std::string path = dir_.file("secret");
  const mode_t old_umask = ::umask(022);
  AtomicFileOptions o = options();
  o.mode = 0600;
  write_file_atomically(path, "value", o);
  ::umask(old_umask);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(slurp(path), "value");
}

TEST_P(AtomicFileTest, ConcurrentWritersOfOnePathNeverMix) {
  const std::string path = dir_.file("shared");
  const std::string a(100000, 'a'), b(100000, 'b');
  auto writer = [&](const std::string& content) {
    for (int i = 0; i < 20; ++i) write_file_atomically(path, content, options(4096));
  };
  std::thread ta(writer, a), tb(writer, b);
  ta.join();
  tb.join();
  const std::string last = slurp(path);
  EXPECT_TRUE(last == a || last == b) << "the file mixes both writers' bytes";
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"shared"});
}

TEST_P(AtomicFileTest, MissingDirectoryIsAConfigErrorNamingThePath) {
  const std::string path = dir_.file("no-such-dir/out.csv");
  const std::string what = error_of<ConfigError>([&] { write_file_atomically(path, "x", options()); });
  EXPECT_NE(what.find("cannot write " + path), std::string::npos) << what;
  EXPECT_NE(what.find(std::strerror(ENOENT)), std::string::npos) << what;
}

// The message a write into `dir` (mode 0755, not this user's to write) gives.
// Root may write anywhere, so as root the attempt runs in a child that first
// becomes nobody (65534); the message comes back through a pipe.
std::string error_in_unwritable_directory(const std::string& dir, const std::string& path) {
  ::chmod(dir.c_str(), 0555);
  if (::geteuid() != 0) return error_of<ConfigError>([&] { write_file_atomically(path, "x", {}); });
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    std::string what = "the child could not drop root";
    if (::setgid(65534) == 0 && ::setuid(65534) == 0)
      what = error_of<ConfigError>([&] { write_file_atomically(path, "x", {}); });
    [[maybe_unused]] ssize_t n = ::write(fds[1], what.data(), what.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string what;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) what.append(buffer, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return what;
}

TEST(AtomicFile, UnwritableDirectoryIsAConfigErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("history.csv");
  const std::string what = error_in_unwritable_directory(dir.path(), path);
  EXPECT_NE(what.find("cannot write " + path), std::string::npos) << what;
  EXPECT_NE(what.find(std::strerror(EACCES)), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace cohort::atomic_file_test
