#include "cohort/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort {
namespace {

std::atomic<uint64_t> next_temporary{0};

std::string temporary_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(next_temporary.fetch_add(1));
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, AtomicFileOptions options) : path_(std::move(path)), options_(options) {
  // O_EXCL: a temporary left by a crashed process that had this pid is
  // never written through; the next number is tried instead.
  int err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    temporary_ = temporary_name(path_);
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(options_.mode));
    err = errno;
    if (fd_ >= 0 || err != EEXIST) break;
  }
  COHORT_CHECK_AS(ConfigError, fd_ >= 0) << "cannot write " << path_ << ": cannot create " << temporary_ << ": "
                                         << std::strerror(err)
                                         << " (does the directory exist, and may this process write there?)";
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  COHORT_THROW(ConfigError) << "cannot write " << path_ << ": " << what << ": " << std::strerror(err);
}

void AtomicFile::write(const void* data, size_t n) {
  COHORT_CHECK(fd_ >= 0) << path_ << ": write after commit() or after a failed write";
  size_ += n;
  if (buffer_.size() + n > options_.buffer_bytes) flush();
  if (n >= options_.buffer_bytes) {
    write_out(data, n, flushed_);  // large: no copy through the buffer
    flushed_ += n;
    return;
  }
  if (buffer_.capacity() == 0) buffer_.reserve(options_.buffer_bytes);
  const char* p = static_cast<const char*>(data);
  buffer_.insert(buffer_.end(), p, p + n);
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  COHORT_CHECK(fd_ >= 0) << path_ << ": write after commit() or after a failed write";
  COHORT_CHECK(offset + n <= size_) << path_ << ": write_at(" << offset << ", " << n << " bytes) passes the " << size_
                                    << " bytes written";
  flush();
  write_out(data, n, offset);
}

void AtomicFile::flush() {
  if (buffer_.empty()) return;
  write_out(buffer_.data(), buffer_.size(), flushed_);
  flushed_ += buffer_.size();
  buffer_.clear();
}

void AtomicFile::write_out(const void* data, size_t n, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      fail("writing " + temporary_, err);
    }
    p += w;
    n -= size_t(w);
    offset += uint64_t(w);
  }
}

void AtomicFile::commit(const std::string& keep_replaced_as) {
  COHORT_CHECK(fd_ >= 0) << path_ << ": commit() after commit() or after a failed write";
  const bool durable = options_.durability == Durability::fsync_file_and_dir;
  flush();
  // The data must be on disk before the rename makes it the file: otherwise
  // a crash can leave the new name on an empty file.
  if (durable && ::fsync(fd_) != 0) {
    const int err = errno;
    fail("fsync " + temporary_, err);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    fail("closing " + temporary_, err);
  }
  struct stat st;
  if (!keep_replaced_as.empty() && ::stat(path_.c_str(), &st) == 0) {
    const std::string link = temporary_name(keep_replaced_as);
    if (::link(path_.c_str(), link.c_str()) == 0) {
      if (::rename(link.c_str(), keep_replaced_as.c_str()) != 0) {
        const int err = errno;
        ::unlink(link.c_str());
        fail("keeping the file it replaces as " + keep_replaced_as, err);
      }
    } else if (::rename(path_.c_str(), keep_replaced_as.c_str()) != 0) {  // no hard links here
      const int err = errno;
      fail("keeping the file it replaces as " + keep_replaced_as, err);
    }
  }
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail("renaming " + temporary_ + " onto it", err);
  }
  if (!durable) return;
  // The rename is an entry in the directory: it survives a crash once the
  // directory is on disk too. A directory this process may not open for
  // reading cannot be synced; the file itself is.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  const int synced = ::fsync(dir);
  const int err = errno;
  ::close(dir);
  COHORT_CHECK_AS(ConfigError, synced == 0)
      << "cannot write " << path_ << ": it is in place, but fsync of its directory failed: " << std::strerror(err);
}

void write_file_atomically(const std::string& path, std::string_view bytes, const AtomicFileOptions& options) {
  AtomicFile file(path, options);
  file.write(bytes);
  file.commit();
}

}  // namespace cohort
