// FileWriter: a file written through a buffer into a temporary next to its
// final path and renamed onto it by commit(), so that no reader ever sees a
// half-written file under the final name. Destroyed without commit(), the
// writer removes the temporary. Every I/O failure (a full disk, a missing
// directory) is a ConfigError naming the path.
//
// commit() does not fsync: it makes a file appear whole or not at all to
// other processes, not survive a power cut.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::data {

class FileWriter {
 public:
  explicit FileWriter(std::string path, size_t buffer_bytes = size_t(1) << 20);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Bytes written so far (the offset the next write lands at).
  uint64_t size() const { return size_; }
  void commit();
  const std::string& path() const { return path_; }

 private:
  void flush();
  void write_out(const uint8_t* p, size_t n);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  size_t used_ = 0;
  uint64_t size_ = 0;
};

// Writes `bytes` to `path` through a FileWriter.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace cohort::data
