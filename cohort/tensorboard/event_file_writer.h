// EventFileWriter: one TensorBoard event file, appended to.
//
// The file is TensorFlow's: TFRecord frames (cohort/data/record_format.h:
// length, masked CRC-32C, data, masked CRC-32C) around serialized `Event`
// messages (event.proto), the first one `file_version: "brain.Event:2"`.
// Records are buffered in memory and reach the file at flush(), with
// write(2) calls of whole frames, appended: a process killed at any point
// leaves every record flushed before intact, and at most one partial frame
// after them, which readers (event_file_reader.h, TensorBoard) stop at.
// The file is created, with its first record flushed, by the constructor.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cohort::tfevents {

class EventFileWriter {
 public:
  // A new file in `dir` (created with its parents if missing), named by
  // event_file_name.h from this time, host and process. ConfigError naming
  // the path when it cannot be created.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();  // flushes; a failure is logged, not thrown
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Buffers an Event holding one Summary value: `tag`'s `value` (as
  // float32, TensorBoard's simple_value) at `step`, logged at `wall_time`
  // (seconds since the Unix epoch).
  void add_scalar(std::string_view tag, int64_t step, float value, double wall_time);
  // Appends the buffered records to the file. Error naming the file when
  // the write fails (disk full, ...).
  void flush();

  const std::string& path() const { return path_; }

 private:
  void add_record(const std::string& event_bytes);

  std::string path_;
  int fd_ = -1;
  std::string buffer_;  // whole frames not yet written
};

// Seconds since the Unix epoch, now (the wall_time of events).
double wall_time_now();

}  // namespace cohort::tfevents
