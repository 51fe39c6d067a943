// Source: a dataset whose samples can be read by index, from any thread.
//
// The pipeline (pipeline.h) decides which indices each rank reads in which
// order; a source only has to read one. Sources here: RecordSource (TFRecord
// files, record_source.h), IdxSource (IDX images and labels, idx_source.h),
// TextLineSource (text_line_source.h), MemorySource (below); the torch layer
// adds tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/data/feature.h"

namespace cohort::data {

class Source {
 public:
  virtual ~Source() = default;

  virtual uint64_t size() const = 0;
  // Sample `index` (< size()) with Sample::index == index. Thread-safe. A
  // record that cannot be decoded throws BadRecordError (bad_record.h).
  virtual Sample read(uint64_t index) const = 0;
  // Where sample `index` comes from, for messages: "a.tfrecord record 17".
  virtual std::string describe(uint64_t index) const { return "sample " + std::to_string(index); }
  // Samples per file, in file order, summing to size(): sharding by file
  // deals whole files to ranks. A source without files is one "file".
  virtual std::vector<uint64_t> file_sizes() const { return {size()}; }
};

// Samples held in memory (tests, small data sets).
class MemorySource final : public Source {
 public:
  explicit MemorySource(std::vector<Sample> samples);
  uint64_t size() const override { return samples_.size(); }
  Sample read(uint64_t index) const override;

 private:
  std::vector<Sample> samples_;
};

// The first `n` samples of `source` (all of them when n >= its size), as a
// source of their own: files keep their sizes up to the cut.
std::shared_ptr<const Source> first_samples(std::shared_ptr<const Source> source, uint64_t n);

}  // namespace cohort::data
