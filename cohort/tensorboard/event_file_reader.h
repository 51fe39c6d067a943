// read_event_file: the records of a TensorBoard event file (any writer's:
// cohort's, TensorFlow's, tensorboardX's), their CRCs checked.
//
// A file whose writer was killed mid-record ends in a partial frame: the
// reader stops cleanly before it and says so (truncated_tail), as
// TensorBoard does. A whole frame whose CRC does not match, or whose data
// is not an Event, is damage, not a tail: CorruptRecordError (file, byte
// offset; cohort/data/record_format.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/tensorboard/scalar_event.h"

namespace cohort::tfevents {

struct EventFile {
  std::string file_version;    // the first record's ("brain.Event:2"); empty if it has none
  double start_wall_time = 0;  // the first record's wall_time
  // Every scalar summary value in file order: simple_value, or a 0-d
  // DT_FLOAT/DT_DOUBLE tensor (TF 2's tf.summary.scalar). Other values
  // (images, histograms, ...) and other events are skipped.
  std::vector<ScalarEvent> scalars;
  uint64_t records = 0;         // whole records read
  uint64_t valid_bytes = 0;     // their bytes: where the next record would start
  bool truncated_tail = false;  // bytes after them that are not a whole record
};

EventFile read_event_file(const std::string& path);

}  // namespace cohort::tfevents
