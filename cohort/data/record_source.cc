#include "cohort/data/record_source.h"

#include <algorithm>
#include <filesystem>

#include "cohort/data/example.h"
#include "cohort/data/record_reader.h"

namespace cohort::data {

RecordSource::RecordSource(std::vector<std::string> files, RecordSourceOptions options)
    : options_(options), paths_(std::move(files)) {
  COHORT_CHECK_AS(ConfigError, !paths_.empty()) << "a RecordSource needs at least one file";
  starts_.push_back(0);
  for (const std::string& path : paths_) {
    files_.push_back(open_file(path));
    indexes_.push_back(index_of(files_.back()));
    COHORT_CHECK_AS(ConfigError, indexes_.back().records() > 0)
        << path << " holds no records (" << files_.back()->size() << " bytes)";
    starts_.push_back(starts_.back() + indexes_.back().records());
  }
}

std::pair<size_t, uint64_t> RecordSource::locate(uint64_t index) const {
  COHORT_CHECK_LT(index, size()) << "sample index out of range";
  const size_t file = size_t(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
  return {file, index - starts_[file]};
}

Sample RecordSource::read(uint64_t index) const {
  const auto [file, record] = locate(index);
  const RecordIndex& idx = indexes_[file];
  // Each worker thread reuses its buffer: no allocation per record once
  // it has grown to the largest record.
  thread_local std::vector<uint8_t> data;
  read_record_at(*files_[file], idx.offset(record), idx.frame_size(record), data);
  Sample sample;
  sample.index = index;
  if (options_.decoding == RecordDecoding::raw) {
    sample.features.set("record", Feature::bytes({std::string(data.begin(), data.end())}));
    return sample;
  }
  std::string error;
  if (!parse_example(data, sample.features, &error))
    throw BadRecordError(paths_[file] + ": record " + std::to_string(record) + " at byte offset " +
                         std::to_string(idx.offset(record)) + ": " + error);
  return sample;
}

std::string RecordSource::describe(uint64_t index) const {
  const auto [file, record] = locate(index);
  return paths_[file] + " record " + std::to_string(record) + " (byte offset " +
         std::to_string(indexes_[file].offset(record)) + ")";
}

std::vector<uint64_t> RecordSource::file_sizes() const {
  std::vector<uint64_t> sizes;
  for (const RecordIndex& idx : indexes_) sizes.push_back(idx.records());
  return sizes;
}

std::vector<std::string> list_record_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  COHORT_CHECK_AS(ConfigError, !ec && fs::exists(status)) << path << ": no such file or directory";
  if (!fs::is_directory(status)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.find(".tfrecord") == std::string::npos) continue;
    if (name.ends_with(".index") || name.find(".tmp.") != std::string::npos) continue;
    files.push_back(entry.path().string());
  }
  COHORT_CHECK_AS(ConfigError, !ec) << "cannot list " << path << ": " << ec.message();
  COHORT_CHECK_AS(ConfigError, !files.empty())
      << path << " holds no TFRecord files (names containing \".tfrecord\"; make some with `cohort-data convert`)";
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace cohort::data
