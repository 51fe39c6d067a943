#include "cohort/torch/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cohort/common/check.h"

namespace cohort {
namespace {

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

}  // namespace

// Synced, file and directory: a checkpoint is what a job restarts from, so
// it must survive the power cut it exists for.
CheckpointFileWriter::CheckpointFileWriter(std::string path, CheckpointKind kind)
    : file_(std::move(path), {.durability = Durability::fsync_file_and_dir, .buffer_bytes = size_t(1) << 20}) {
  header_.kind = kind;
  const std::array<char, kCheckpointHeaderBytes> placeholder{};
  file_.write(placeholder.data(), placeholder.size());
}

void CheckpointFileWriter::append(const void* data, size_t n) {
  file_.write(data, n);
  header_.payload_crc = crc32_update(header_.payload_crc, data, n);
  header_.payload_bytes += n;
}

void CheckpointFileWriter::commit(const CheckpointOptions& options) {
  const auto header = checkpoint_header(header_);
  file_.write_at(0, header.data(), header.size());
  file_.commit(options.keep_previous ? previous_checkpoint_path(file_.path()) : std::string());
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
