#include "cohort/tensorboard/run_writer.h"

#include <algorithm>

#include "cohort/common/logging.h"
#include "cohort/data/record_format.h"
#include "cohort/tensorboard/event_file_name.h"
#include "cohort/tensorboard/event_file_reader.h"

namespace cohort::tfevents {

RunWriter::RunWriter(std::string dir) : dir_(std::move(dir)) {}

void RunWriter::load_existing() {
  loaded_ = true;
  for (const std::string& path : list_event_files(dir_)) {
    try {
      for (const ScalarEvent& s : read_event_file(path).scalars) {
        auto [it, added] = last_step_.try_emplace(s.tag, s.step);
        if (!added) it->second = std::max(it->second, s.step);
      }
    } catch (const data::CorruptRecordError& e) {
      // Training goes on; TensorBoard will show what it can of that file.
      COHORT_LOG(warn) << "TensorBoard: " << e.what() << "; the steps in that file may be written again";
    }
  }
}

int64_t RunWriter::last_step(std::string_view tag) {
  if (!loaded_) load_existing();
  const auto it = last_step_.find(tag);
  return it == last_step_.end() ? -1 : it->second;
}

bool RunWriter::add_scalar(std::string_view tag, int64_t step, double value, double wall_time) {
  if (!loaded_) load_existing();
  auto it = last_step_.find(tag);
  if (it != last_step_.end() && step <= it->second) return false;
  if (!file_) file_ = std::make_unique<EventFileWriter>(dir_);
  file_->add_scalar(tag, step, float(value), wall_time);
  if (it == last_step_.end()) last_step_.emplace(std::string(tag), step);
  else it->second = step;
  return true;
}

void RunWriter::flush() {
  if (file_) file_->flush();
}

}  // namespace cohort::tfevents
