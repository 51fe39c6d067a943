// AtomicFile: a file written under a temporary name next to its final path
// and renamed onto it by commit(), so that a reader sees the old file or the
// whole new one, never part of one. The files cohort writes whole for others
// to read (record shards, indexes, checkpoints, manifests, store values, CSV
// and PNG histories) go through it.
//
//   AtomicFile out(path, {.durability = Durability::fsync_file_and_dir});
//   out.write(header);
//   out.write(payload.data(), payload.size());
//   out.commit();                  // `path` now holds exactly what was written
//
// The temporary is "<path>.tmp.<pid>.<n>" (n counts this process's files,
// so threads and processes writing one path never share a temporary; the
// last commit wins whole). A writer destroyed without commit(), or one whose
// write or commit failed, removes its temporary: a failed save leaves the
// file that was there before untouched. Every I/O failure (a missing or
// read-only directory, a full disk) is a ConfigError naming `path` and the
// system's reason.
//
// Durability is the caller's choice, made explicitly (see Durability).
// Writes are gathered in a buffer of `buffer_bytes`; a write at least that
// large goes straight to the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

enum class Durability {
  // Whole or nothing for other processes while the machine runs; after a
  // power cut or kernel crash the file may be the old one, the new one or
  // (filesystem-dependent) empty. For files that are cheap to write again.
  none,
  // fsync(2) of the data before the rename and of the directory after it:
  // once commit() returns, the new file survives a power cut. Costs a disk
  // flush per file (milliseconds on spinning disks).
  fsync_file_and_dir,
};

struct AtomicFileOptions {
  Durability durability = Durability::fsync_file_and_dir;
  uint32_t mode = 0644;  // permissions of the new file (before the umask)
  size_t buffer_bytes = size_t(64) << 10;
};

class AtomicFile {
 public:
  // Creates the temporary; ConfigError when it cannot be created.
  explicit AtomicFile(std::string path, AtomicFileOptions options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites `n` bytes already written, from `offset` (a header whose
  // contents are known only at the end); offset + n must not pass size().
  void write_at(uint64_t offset, const void* data, size_t n);
  // Bytes written so far (the offset the next write lands at).
  uint64_t size() const { return size_; }

  // Makes the written bytes the file at path(); the writer is done. When
  // `keep_replaced_as` is not empty and path() exists, the file it replaces
  // stays under that name (a hard link renamed into place, so path() exists
  // at every instant; a move where the filesystem has no hard links).
  void commit(const std::string& keep_replaced_as = {});

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_; }

 private:
  void flush();
  // pwrite(2)s all of it at `offset`.
  void write_out(const void* data, size_t n, uint64_t offset);
  // Closes and removes the temporary, then throws a ConfigError naming
  // path() with `what` and strerror(err).
  [[noreturn]] void fail(const std::string& what, int err);

  std::string path_;
  std::string temporary_;
  AtomicFileOptions options_;
  int fd_ = -1;
  std::vector<char> buffer_;
  uint64_t size_ = 0;     // bytes written, buffered ones included
  uint64_t flushed_ = 0;  // bytes in the file
};

// Writes `bytes` as the whole file at `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, const AtomicFileOptions& options);

}  // namespace cohort
