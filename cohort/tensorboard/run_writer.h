// RunWriter: the scalars of one TensorBoard run (a directory such as
// logdir/train), never a step twice.
//
// A tag's steps in a run only move forward: add_scalar() skips a (tag,
// step) whose step is at or below the largest step of that tag already in
// the run, counting the run's existing event files (read when the writer
// first writes: a job resumed from a backup, or a new chief after an
// elastic change, finds what the previous process flushed) and what this
// writer wrote. A job that redoes steps (resumed from a backup older than
// its last flush; survivors of an elastic change going back to the last
// commit) thus adds nothing TensorBoard would plot twice or backwards; steps
// written before a kill but never flushed are written again by whoever
// redoes them. The event file (event_file_writer.h) is created at the first
// scalar written, so a run nothing is written to leaves no directory.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "cohort/tensorboard/event_file_writer.h"

namespace cohort::tfevents {

class RunWriter {
 public:
  explicit RunWriter(std::string dir);

  // Buffers `tag`'s `value` at `step` unless the run already has `tag` at
  // `step` or later; returns whether it was buffered.
  bool add_scalar(std::string_view tag, int64_t step, double value, double wall_time = wall_time_now());
  // Writes what add_scalar() buffered (EventFileWriter::flush).
  void flush();

  // The largest step of `tag` in the run, or -1.
  int64_t last_step(std::string_view tag);
  const std::string& dir() const { return dir_; }

 private:
  // Reads the run's existing files once, before the first write.
  void load_existing();

  std::string dir_;
  bool loaded_ = false;
  std::map<std::string, int64_t, std::less<>> last_step_;
  std::unique_ptr<EventFileWriter> file_;
};

}  // namespace cohort::tfevents
