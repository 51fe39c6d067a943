// RandomAccessFile: bytes read at any offset, from a file (pread) or from
// memory (the fuzzers and tests). Readers of every format here take one, so
// a format's parser never depends on where its bytes live.
//
// read_at is const and thread-safe: the pipeline's workers read records of
// one file concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cohort::data {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // The name errors use (the path, or what a memory file was called).
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // Reads up to out.size() bytes at `offset`; returns the count read, which is
  // smaller only at the end of the file. An I/O error throws ConfigError
  // naming the file and offset.
  virtual size_t read_at(uint64_t offset, std::span<uint8_t> out) const = 0;
};

// ConfigError naming the path when it cannot be opened or is a directory.
std::shared_ptr<const RandomAccessFile> open_file(const std::string& path);

// A file over bytes in memory.
std::shared_ptr<const RandomAccessFile> memory_file(std::string name, std::vector<uint8_t> bytes);
// Over bytes the caller keeps alive (no copy).
std::shared_ptr<const RandomAccessFile> memory_file_view(std::string name, std::span<const uint8_t> bytes);

// The whole file's bytes (ConfigError as open_file).
std::vector<uint8_t> read_whole_file(const std::string& path);

}  // namespace cohort::data
