// A checkpoint file written and read as a stream (checkpoint_frame.h's
// framing), so that a payload larger than what a process should hold at
// once (a sharded or consolidated checkpoint of a large model) is never
// assembled in memory.
//
// Writing goes through an AtomicFile (common/atomic_file.h) behind a
// placeholder header; commit() writes the real header (size, CRC-32 of what
// was appended), fsyncs, keeps the current "<path>" as "<path>.prev" when
// asked (hard link, then rename: "<path>" exists at every instant), renames
// the new file over "<path>" and fsyncs the directory. A writer destroyed
// without commit() removes its temporary file: a failed save leaves the last
// good checkpoint as it was.
//
// Reading verifies the header and the payload's CRC in one pass of 1 MiB
// reads, then serves any range of the payload (pread).
#pragma once

#include <cstdint>
#include <string>

#include "cohort/common/atomic_file.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/checkpoint_frame.h"

namespace cohort {

class CheckpointFileWriter {
 public:
  CheckpointFileWriter(std::string path, CheckpointKind kind);
  void append(const void* data, size_t n);
  uint64_t appended() const { return header_.payload_bytes; }
  // Makes the file "<path>"; the writer is done.
  void commit(const CheckpointOptions& options = {});

 private:
  AtomicFile file_;
  CheckpointHeader header_;
};

class CheckpointFileReader {
 public:
  // Opens and verifies `path`; ConfigError (naming it and what is wrong:
  // missing, truncated, corrupt, another kind) otherwise.
  CheckpointFileReader(std::string path, CheckpointKind kind);
  ~CheckpointFileReader();
  CheckpointFileReader(const CheckpointFileReader&) = delete;
  CheckpointFileReader& operator=(const CheckpointFileReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t payload_bytes() const { return header_.payload_bytes; }
  // `n` bytes of the payload from `offset`; ConfigError past its end.
  void read(uint64_t offset, void* out, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  CheckpointHeader header_;
};

}  // namespace cohort
