// The sidecar index of a TFRecord file: where each record starts, so that
// any record can be read directly (random access, global shuffle).
//
// On disk it is `<file>.index`, one line per record, "<offset> <size>\n",
// where size is the whole frame (data length + 16). That is the text format
// of NVIDIA DALI's tfrecord2idx, so either tool's index serves both.
//
// An index is checked against its file when loaded: frames contiguous from
// byte 0 to the end of the file, each at least a frame's overhead. A stale
// index that passes that check still cannot return wrong data: every read
// checks the frame's own length and CRCs against it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/data/random_access_file.h"

namespace cohort::data {

class RecordIndex {
 public:
  RecordIndex() : starts_{0} {}
  // `starts` holds each record's offset followed by the file size.
  explicit RecordIndex(std::vector<uint64_t> starts);

  uint64_t records() const { return starts_.size() - 1; }
  uint64_t offset(uint64_t record) const { return starts_[record]; }
  // The frame's size in bytes (header + data + footer).
  uint64_t frame_size(uint64_t record) const { return starts_[record + 1] - starts_[record]; }
  uint64_t file_size() const { return starts_.back(); }
  void append(uint64_t frame_size) { starts_.push_back(starts_.back() + frame_size); }

  bool operator==(const RecordIndex&) const = default;

 private:
  std::vector<uint64_t> starts_;
};

inline std::string index_path(const std::string& record_file) { return record_file + ".index"; }

// Reads `file` through and indexes its frames, checking every CRC.
// CorruptRecordError at the first bad frame.
RecordIndex build_index(std::shared_ptr<const RandomAccessFile> file);

// Reads `index_file` and checks it against `record_file` of `file_size`
// bytes. ConfigError naming both files when it does not parse or match.
RecordIndex load_index(const std::string& index_file, const std::string& record_file, uint64_t file_size);

void write_index(const std::string& index_file, const RecordIndex& index);

// The index of `file`: from its sidecar when one exists, else by a scan.
RecordIndex index_of(std::shared_ptr<const RandomAccessFile> file);

}  // namespace cohort::data
