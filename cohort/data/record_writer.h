// RecordWriter: a TFRecord file as TensorFlow frames it (record_format.h),
// and its sidecar index (record_index.h).
//
// The file is written under a temporary name and appears under its own,
// complete, at close() (common/atomic_file.h, synced to disk: a shard set is
// written once and read by many jobs, which must not find an empty shard
// after a power cut); the index follows it. A writer destroyed without
// close() leaves neither behind.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cohort/common/atomic_file.h"
#include "cohort/data/record_index.h"

namespace cohort::data {

struct RecordWriterOptions {
  bool write_index = true;  // also write <path>.index at close()
};

class RecordWriter {
 public:
  explicit RecordWriter(std::string path, RecordWriterOptions options = {});

  void write(std::span<const uint8_t> data);
  void write(std::string_view data) { write({reinterpret_cast<const uint8_t*>(data.data()), data.size()}); }
  void close();

  uint64_t records() const { return index_.records(); }
  uint64_t bytes() const { return file_.size(); }
  const RecordIndex& index() const { return index_; }

 private:
  RecordWriterOptions options_;
  AtomicFile file_;
  RecordIndex index_;
};

}  // namespace cohort::data
