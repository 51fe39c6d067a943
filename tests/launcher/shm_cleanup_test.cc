#include "cohort/launcher/shm_cleanup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/launcher/cohortrun_process.h"

namespace cohort::launcher::shm_cleanup_test {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(ShmCleanup, RemovesOnlyTheJobsSegments) {
  testing::TempDir dir;
  const std::vector<std::string> names{"cohort-job1-a", "cohort-job1-b-c", "cohort-job10-x", "cohort-job1",
                                       "xcohort-job1-y", "other"};
  for (const auto& n : names) ::close(::open((dir.path() + "/" + n).c_str(), O_CREAT | O_WRONLY, 0600));
  // A directory of the job's, with contents (an elastic restore's parts).
  ASSERT_EQ(::mkdir((dir.path() + "/cohort-job1-restore").c_str(), 0700), 0);
  ::close(::open((dir.path() + "/cohort-job1-restore/part").c_str(), O_CREAT | O_WRONLY, 0600));
  std::vector<std::string> removed = remove_job_segments("job1", dir.path());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"cohort-job1-a", "cohort-job1-b-c", "cohort-job1-restore"}));
  EXPECT_FALSE(exists(dir.path() + "/cohort-job1-restore"));
  EXPECT_FALSE(exists(dir.path() + "/cohort-job1-a"));
  for (const char* kept : {"cohort-job10-x", "cohort-job1", "xcohort-job1-y", "other"})
    EXPECT_TRUE(exists(dir.path() + "/" + kept)) << kept;
  EXPECT_TRUE(remove_job_segments("job1", dir.path()).empty());
}

TEST(ShmCleanup, MissingDirectoryRemovesNothing) {
  EXPECT_TRUE(remove_job_segments("job1", "/nonexistent/dir").empty());
}

TEST(ShmCleanup, WorksOnDevShm) {
  const std::string job = "ut" + std::to_string(::getpid());
  const std::string path = "/dev/shm/cohort-" + job + "-seg";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd < 0) GTEST_SKIP() << "/dev/shm is not writable here";
  ::close(fd);
  EXPECT_EQ(remove_job_segments(job), std::vector<std::string>{"cohort-" + job + "-seg"});
  EXPECT_FALSE(exists(path));
}

}  // namespace
}  // namespace cohort::launcher::shm_cleanup_test
