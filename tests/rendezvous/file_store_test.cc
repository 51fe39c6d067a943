// FileStore specifics: key names, directory creation and permissions, and
// several stores (as several ranks would have) sharing one directory.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "cohort/rendezvous/file_store.h"
#include "test_util.h"

namespace cohort::rendezvous::file_store_test {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

TEST(FileStoreTest, KeysWithSlashesAndDotsStayInsideTheDirectory) {
  TempDir dir;
  const std::string root = dir.path() + "/store";
  FileStore store(root);
  const std::vector<std::string> keys = {"a/b/c", "../escape", "/abs", ".", "..", "", "trailing/"};
  for (size_t i = 0; i < keys.size(); ++i) store.set(keys[i], "v" + std::to_string(i));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(store.get(keys[i], 1s), "v" + std::to_string(i));
  // Nothing was written outside the store's directory, and no subdirectories.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename(), "store");
  for (const auto& entry : std::filesystem::directory_iterator(root))
    EXPECT_TRUE(entry.is_regular_file()) << entry.path();
  EXPECT_TRUE(store.remove("a/b/c"));
  EXPECT_FALSE(store.check(std::vector<std::string>{"a/b/c"}));
  EXPECT_TRUE(store.check(std::vector<std::string>{"../escape"}));
}

TEST(FileStoreTest, VeryLongKeys) {
  TempDir dir;
  FileStore store(dir.path());
  const std::string long_a(5000, 'a');
  std::string long_b = long_a;
  long_b.back() = 'b';
  store.set(long_a, "A");
  store.set(long_b, "B");
  EXPECT_EQ(store.get(long_a, 1s), "A");
  EXPECT_EQ(store.get(long_b, 1s), "B");
  EXPECT_EQ(store.add(long_a + "/n", 3), 3);
}

TEST(FileStoreTest, CreatesNestedDirectoriesPrivately) {
  TempDir dir;
  const std::string root = dir.path() + "/x/y/z";
  FileStore store(root);
  struct stat st {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir.path() + "/x").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Values are private too.
  store.set("k", "secret value");
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0077, 0u) << entry.path();
  }
}

TEST(FileStoreTest, UnusableDirectoryIsAConfigError) {
  TempDir dir;
  const std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "not a directory";
  ASSERT_TRUE(std::filesystem::is_regular_file(file));
  EXPECT_THROW(FileStore{file + "/store"}, ConfigError);
  EXPECT_THROW(FileStore{file}, ConfigError);
  EXPECT_THROW(FileStore{""}, ConfigError);
}

TEST(FileStoreTest, NoTemporaryFilesAreLeftBehind) {
  TempDir dir;
  FileStore store(dir.path());
  for (int i = 0; i < 20; ++i) {
    store.set("k" + std::to_string(i), std::string(1000, 'x'));
    store.add("n", 1);
    store.compare_set("c", std::to_string(i), std::to_string(i + 1));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_FALSE(entry.path().filename().string().starts_with(".tmp")) << entry.path();
}

TEST(FileStoreTest, ReadersNeverSeeAPartialValue) {
  TempDir dir;
  FileStore writer(dir.path());
  FileStore reader(dir.path());
  const std::string a(1 << 20, 'a');
  const std::string b(1 << 20, 'b');
  writer.set("v", a);
  std::atomic<bool> stop{false};
  testing::Worker t([&] {
    for (int i = 0; !stop; ++i) writer.set("v", i % 2 ? a : b);
  });
  for (int i = 0; i < 200; ++i) {
    const std::string got = reader.get("v", 1s);
    ASSERT_TRUE(got == a || got == b) << "torn read of " << got.size() << " bytes";
  }
  stop = true;
  t.join();
}

}  // namespace
}  // namespace cohort::rendezvous::file_store_test
