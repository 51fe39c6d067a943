// RecordSource: the records of TFRecord files as samples, by index.
//
// Sample i is the i-th record counting through the files in the order
// given. Each file's sidecar index (record_index.h) is loaded, or built by
// reading the file through when there is none. Reading a sample is one
// pread of its frame, both CRCs checked; with RecordDecoding::example the
// record is parsed as a tf.train.Example into the sample's features, with
// ::raw the sample holds one bytes feature "record".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/data/random_access_file.h"
#include "cohort/data/record_index.h"
#include "cohort/data/source.h"

namespace cohort::data {

enum class RecordDecoding { example, raw };

struct RecordSourceOptions {
  RecordDecoding decoding = RecordDecoding::example;
};

class RecordSource final : public Source {
 public:
  // ConfigError when `files` is empty or a file cannot be opened or indexed.
  explicit RecordSource(std::vector<std::string> files, RecordSourceOptions options = {});

  uint64_t size() const override { return starts_.back(); }
  Sample read(uint64_t index) const override;
  std::string describe(uint64_t index) const override;
  std::vector<uint64_t> file_sizes() const override;

  const std::vector<std::string>& files() const { return paths_; }

 private:
  // The file holding sample `index` and the record's number in it.
  std::pair<size_t, uint64_t> locate(uint64_t index) const;

  RecordSourceOptions options_;
  std::vector<std::string> paths_;
  std::vector<std::shared_ptr<const RandomAccessFile>> files_;
  std::vector<RecordIndex> indexes_;
  std::vector<uint64_t> starts_;  // first sample of each file, then the total
};

// The TFRecord files `path` names: the file itself, or, for a directory,
// every regular file in it whose name contains ".tfrecord" (not the
// ".index" sidecars or temporaries), sorted by name. ConfigError when there
// are none.
std::vector<std::string> list_record_files(const std::string& path);

}  // namespace cohort::data
