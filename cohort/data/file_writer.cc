#include "cohort/data/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort::data {

FileWriter::FileWriter(std::string path, size_t buffer_bytes)
    : path_(std::move(path)), buffer_(std::max<size_t>(buffer_bytes, 4096)) {
  // The pid keeps concurrent writers of one path (two ranks, say) apart;
  // whichever commits last wins whole.
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  COHORT_CHECK_AS(ConfigError, fd_ >= 0) << "cannot create " << temp_path_ << ": " << std::strerror(errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void FileWriter::write(const void* data, size_t n) {
  COHORT_CHECK(fd_ >= 0) << path_ << ": write after commit";
  size_ += n;
  if (used_ + n > buffer_.size()) flush();
  if (n >= buffer_.size()) {
    write_out(static_cast<const uint8_t*>(data), n);  // large: no copy through the buffer
    return;
  }
  std::memcpy(buffer_.data() + used_, data, n);
  used_ += n;
}

void FileWriter::flush() {
  write_out(buffer_.data(), used_);
  used_ = 0;
}

void FileWriter::write_out(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    COHORT_CHECK_AS(ConfigError, w > 0) << "cannot write " << temp_path_ << ": " << std::strerror(errno);
    p += w;
    n -= size_t(w);
  }
}

void FileWriter::commit() {
  COHORT_CHECK(fd_ >= 0) << path_ << ": committed twice";
  flush();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    COHORT_THROW(ConfigError) << "cannot write " << temp_path_ << ": " << std::strerror(err);
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    COHORT_THROW(ConfigError) << "cannot rename " << temp_path_ << " to " << path_ << ": " << std::strerror(err);
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  FileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

}  // namespace cohort::data
