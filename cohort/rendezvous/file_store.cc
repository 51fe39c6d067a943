#include "cohort/rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"
#include "cohort/rendezvous/auth.h"
#include "cohort/rendezvous/store_util.h"

namespace cohort::rendezvous {
namespace {

// Layout of the directory:
//   lock          flock'ed around every mutation, so add and compare_set are
//                 atomic with respect to each other and to set/remove
//   k<hex(key)>   one file per key (hex keeps any byte legal in a file name)
//   h<sha256hex>  keys whose hex name would pass NAME_MAX use their hash
//   <name>.tmp.<pid>.<n>  a value being written, renamed over its key when
//                 complete (common/atomic_file.h)
constexpr size_t kMaxHexName = 200;

std::string key_file_name(const std::string& key) {
  std::string hex = to_hex(key);
  if (hex.size() <= kMaxHexName) return "k" + hex;
  return "h" + to_hex(sha256(key));
}

std::string errno_text(int e) { return std::strerror(e); }

void make_directories(const std::string& directory) {
  // mkdir -p, creating each missing level with mode 0700: the store may hold
  // the job's addresses and must not be readable by other users.
  std::string path;
  size_t pos = 0;
  while (pos <= directory.size()) {
    size_t next = directory.find('/', pos);
    if (next == std::string::npos) next = directory.size();
    path = directory.substr(0, next);
    pos = next + 1;
    if (path.empty()) continue;  // leading '/'
    if (::mkdir(path.c_str(), 0700) == 0) continue;
    const int e = errno;
    struct stat st {};
    if (e == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    COHORT_THROW(ConfigError) << "FileStore: cannot create directory '" << path << "': "
                              << (e == EEXIST ? "exists and is not a directory" : errno_text(e));
  }
}

std::optional<Bytes> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return std::nullopt;
    COHORT_THROW(Error) << "FileStore: cannot open '" << path << "': " << errno_text(e);
  }
  Bytes out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int e = errno;
      ::close(fd);
      COHORT_THROW(Error) << "FileStore: cannot read '" << path << "': " << errno_text(e);
    }
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int e = errno;
  COHORT_CHECK(e == ENOENT) << "FileStore: cannot stat '" << path << "': " << errno_text(e);
  return false;
}

// Readers see the old value or the whole new one, never a partial write.
// Not synced: a store lives as long as its job's processes, which a power cut
// ends too, and rendezvous sets many small keys (an fsync each would make it
// as slow as the disk). 0600: values may hold the job's addresses.
void write_atomically(const std::string& path, const Bytes& value) {
  write_file_atomically(path, value, {.durability = Durability::none, .mode = 0600});
}

// An exclusive flock on the directory's lock file. Each lock opens its own
// file description, so threads of one process exclude each other too.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& directory) {
    const std::string path = directory + "/lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    COHORT_CHECK(fd_ >= 0) << "FileStore: cannot open '" << path << "': " << errno_text(errno);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd_);
      COHORT_THROW(Error) << "FileStore: cannot lock '" << path << "': " << errno_text(e);
    }
  }
  ~DirectoryLock() { ::close(fd_); }  // closing the last descriptor releases the lock
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Polling back-off for waiters: quick at first (the common case is a key set
// a moment later), then gentle on a shared filesystem.
class Backoff {
 public:
  // Sleeps, never past `deadline`; false when the deadline has passed.
  bool sleep_until_next(detail::Clock::time_point deadline) {
    const auto now = detail::Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<detail::Clock::duration>(delay_, deadline - now));
    delay_ = std::min(delay_ * 2, Duration(50));
    return true;
  }

 private:
  Duration delay_{1};
};

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  COHORT_CHECK_AS(ConfigError, !directory_.empty()) << "FileStore needs a directory";
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  make_directories(directory_);
  // Fail now, with a ConfigError, when the directory is not writable.
  const std::string lock = directory_ + "/lock";
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  COHORT_CHECK_AS(ConfigError, fd >= 0)
      << "FileStore: cannot create '" << lock << "': " << errno_text(errno);
  ::close(fd);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  DirectoryLock lock(directory_);
  write_atomically(directory_ + "/" + key_file_name(key), value);
}

Bytes FileStore::get(const std::string& key, Duration timeout) {
  const auto deadline = detail::deadline_after(timeout);
  const std::string path = directory_ + "/" + key_file_name(key);
  Backoff backoff;
  while (true) {
    if (auto value = read_file(path)) return *std::move(value);
    if (!backoff.sleep_until_next(deadline))
      detail::throw_get_timeout("file store in " + directory_, key, timeout);
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirectoryLock lock(directory_);
  const std::string path = directory_ + "/" + key_file_name(key);
  const auto current = read_file(path);
  const int64_t result = detail::add_to_counter("file store in " + directory_, key,
                                                current ? &*current : nullptr, delta);
  write_atomically(path, std::to_string(result));
  return result;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  DirectoryLock lock(directory_);
  const std::string path = directory_ + "/" + key_file_name(key);
  const auto current = read_file(path);
  if (!current) {
    // An absent key matches only an empty `expected`; otherwise it stays absent.
    if (!expected.empty()) return {};
  } else if (*current != expected) {
    return *current;
  }
  write_atomically(path, desired);
  return desired;
}

void FileStore::wait(std::span<const std::string> keys, Duration timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::vector<std::string> paths;
  for (const auto& k : keys) paths.push_back(directory_ + "/" + key_file_name(k));
  Backoff backoff;
  while (true) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!file_exists(paths[i])) missing.push_back(keys[i]);
    if (missing.empty()) return;
    if (!backoff.sleep_until_next(deadline))
      detail::throw_wait_timeout("file store in " + directory_, missing, timeout);
  }
}

bool FileStore::check(std::span<const std::string> keys) {
  for (const auto& k : keys)
    if (!file_exists(directory_ + "/" + key_file_name(k))) return false;
  return true;
}

bool FileStore::remove(const std::string& key) {
  DirectoryLock lock(directory_);
  const std::string path = directory_ + "/" + key_file_name(key);
  if (::unlink(path.c_str()) == 0) return true;
  const int e = errno;
  COHORT_CHECK(e == ENOENT) << "FileStore: cannot remove '" << path << "': " << errno_text(e);
  return false;
}

}  // namespace cohort::rendezvous
