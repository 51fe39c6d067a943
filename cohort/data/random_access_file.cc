#include "cohort/data/random_access_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort::data {
namespace {

class PosixFile final : public RandomAccessFile {
 public:
  explicit PosixFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    COHORT_CHECK_AS(ConfigError, fd_ >= 0) << "cannot open " << path_ << ": " << std::strerror(errno);
    struct stat st {};
    const bool stat_ok = ::fstat(fd_, &st) == 0;
    const int err = errno;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      COHORT_THROW(ConfigError) << "cannot read " << path_ << ": "
                                << (!stat_ok ? std::strerror(err)
                                    : S_ISDIR(st.st_mode) ? "is a directory"
                                                          : "not a regular file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~PosixFile() override { ::close(fd_); }

  const std::string& name() const override { return path_; }
  uint64_t size() const override { return size_; }

  size_t read_at(uint64_t offset, std::span<uint8_t> out) const override {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      COHORT_CHECK_AS(ConfigError, n >= 0)
          << path_ << ": read error at byte offset " << offset + done << ": " << std::strerror(errno);
      if (n == 0) break;
      done += size_t(n);
    }
    return done;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string name, std::vector<uint8_t> owned, std::span<const uint8_t> view)
      : name_(std::move(name)), owned_(std::move(owned)), bytes_(owned_.empty() ? view : std::span<const uint8_t>(owned_)) {}

  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  size_t read_at(uint64_t offset, std::span<uint8_t> out) const override {
    if (offset >= bytes_.size()) return 0;
    const size_t n = std::min<uint64_t>(out.size(), bytes_.size() - offset);
    std::memcpy(out.data(), bytes_.data() + offset, n);
    return n;
  }

 private:
  std::string name_;
  std::vector<uint8_t> owned_;
  std::span<const uint8_t> bytes_;
};

}  // namespace

std::shared_ptr<const RandomAccessFile> open_file(const std::string& path) {
  return std::make_shared<PosixFile>(path);
}

std::shared_ptr<const RandomAccessFile> memory_file(std::string name, std::vector<uint8_t> bytes) {
  return std::make_shared<MemoryFile>(std::move(name), std::move(bytes), std::span<const uint8_t>{});
}

std::shared_ptr<const RandomAccessFile> memory_file_view(std::string name, std::span<const uint8_t> bytes) {
  return std::make_shared<MemoryFile>(std::move(name), std::vector<uint8_t>{}, bytes);
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
  PosixFile file(path);
  std::vector<uint8_t> bytes(file.size());
  const size_t n = file.read_at(0, bytes);
  bytes.resize(n);  // a file that shrank while read
  return bytes;
}

}  // namespace cohort::data
