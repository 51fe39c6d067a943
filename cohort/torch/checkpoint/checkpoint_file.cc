#include "cohort/torch/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cohort/common/check.h"

namespace cohort {
namespace {

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    COHORT_CHECK(w > 0) << "writing checkpoint " << path << ": " << std::strerror(errno);
    data += w;
    n -= size_t(w);
  }
}

// false at the end of the file.
bool pread_all(int fd, char* out, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, n, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    out += r, n -= size_t(r), offset += uint64_t(r);
  }
  return true;
}

void fsync_directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

CheckpointFileWriter::CheckpointFileWriter(std::string path, CheckpointKind kind)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  header_.kind = kind;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  COHORT_CHECK(fd_ >= 0) << "cannot create " << tmp_ << ": " << std::strerror(errno);
  const std::array<char, kCheckpointHeaderBytes> placeholder{};
  try {
    write_all(fd_, placeholder.data(), placeholder.size(), tmp_);
  } catch (...) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    throw;
  }
}

CheckpointFileWriter::~CheckpointFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void CheckpointFileWriter::append(const void* data, size_t n) {
  COHORT_CHECK(fd_ >= 0) << "checkpoint " << path_ << ": append after commit";
  write_all(fd_, static_cast<const char*>(data), n, tmp_);
  header_.payload_crc = crc32_update(header_.payload_crc, data, n);
  header_.payload_bytes += n;
}

void CheckpointFileWriter::commit(const CheckpointOptions& options) {
  COHORT_CHECK(fd_ >= 0) << "checkpoint " << path_ << ": committed twice";
  const auto header = checkpoint_header(header_);
  const int fd = fd_;
  fd_ = -1;  // from here on, this function cleans up
  try {
    COHORT_CHECK(::pwrite(fd, header.data(), header.size(), 0) == ssize_t(header.size()))
        << "writing checkpoint " << tmp_ << ": " << std::strerror(errno);
    // The data must be on disk before the rename makes it the checkpoint.
    COHORT_CHECK(::fsync(fd) == 0) << "fsync " << tmp_ << ": " << std::strerror(errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp_.c_str());
    COHORT_THROW(Error) << "closing " << tmp_ << ": " << why;
  }
  struct stat st;
  if (options.keep_previous && ::stat(path_.c_str(), &st) == 0) {
    const std::string prev = previous_checkpoint_path(path_);
    const std::string prev_tmp = prev + ".tmp." + std::to_string(::getpid());
    ::unlink(prev_tmp.c_str());
    // A hard link keeps "<path>" in place until the new file replaces it.
    if (::link(path_.c_str(), prev_tmp.c_str()) == 0) {
      COHORT_CHECK(::rename(prev_tmp.c_str(), prev.c_str()) == 0)
          << "rename " << prev_tmp << " to " << prev << ": " << std::strerror(errno);
    } else {
      // No hard links on this filesystem: fall back to moving it.
      COHORT_CHECK(::rename(path_.c_str(), prev.c_str()) == 0)
          << "rename " << path_ << " to " << prev << ": " << std::strerror(errno);
    }
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp_.c_str());
    COHORT_THROW(Error) << "rename " << tmp_ << " to " << path_ << ": " << why;
  }
  fsync_directory_of(path_);
}

CheckpointFileReader::CheckpointFileReader(std::string path, CheckpointKind kind) : path_(std::move(path)) {
  const std::string unusable = "checkpoint file " + path_ + " is unusable";
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  COHORT_CHECK_AS(ConfigError, fd_ >= 0) << "cannot open checkpoint file " << path_ << ": " << std::strerror(errno);
  try {
    struct stat st;
    COHORT_CHECK_AS(ConfigError, ::fstat(fd_, &st) == 0) << "cannot stat " << path_ << ": " << std::strerror(errno);
    std::array<char, kCheckpointHeaderBytes> header{};
    const uint64_t size = uint64_t(st.st_size);
    if (size >= header.size()) {
      COHORT_CHECK_AS(ConfigError, pread_all(fd_, header.data(), header.size(), 0))
          << "reading " << path_ << ": " << std::strerror(errno);
    }
    header_ = parse_checkpoint_header(header.data(), size, unusable);
    COHORT_CHECK_AS(ConfigError, header_.kind == kind)
        << unusable << ": it is " << checkpoint_kind_name(header_.kind) << ", expected "
        << checkpoint_kind_name(kind);
    std::vector<char> chunk(size_t(1) << 20);
    uint32_t crc = 0;
    for (uint64_t at = 0; at < header_.payload_bytes;) {
      const size_t n = size_t(std::min<uint64_t>(chunk.size(), header_.payload_bytes - at));
      COHORT_CHECK_AS(ConfigError, pread_all(fd_, chunk.data(), n, kCheckpointHeaderBytes + at))
          << unusable << ": truncated while reading";
      crc = crc32_update(crc, chunk.data(), n);
      at += n;
    }
    COHORT_CHECK_AS(ConfigError, crc == header_.payload_crc) << unusable << ": corrupt payload (checksum mismatch)";
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

CheckpointFileReader::~CheckpointFileReader() { ::close(fd_); }

void CheckpointFileReader::read(uint64_t offset, void* out, size_t n) const {
  COHORT_CHECK_AS(ConfigError, offset + n <= header_.payload_bytes)
      << "checkpoint file " << path_ << " is unusable: a record runs past the payload's end (" << offset + n
      << " > " << header_.payload_bytes << " bytes)";
  COHORT_CHECK_AS(ConfigError, pread_all(fd_, static_cast<char*>(out), n, kCheckpointHeaderBytes + offset))
      << "reading " << path_ << ": " << std::strerror(errno);
}

}  // namespace cohort
