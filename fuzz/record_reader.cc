// libFuzzer harness: TFRecord files (cohort/data/record_reader.h,
// record_index.h) and the tf.train.Example records in them (example.h).
//
// Input: the bytes of a TFRecord file.
//
// Properties, besides the sanitizers': reading with OnBadRecord::fail
// throws nothing but CorruptRecordError, whose offset lies in the file;
// with ::skip nothing is thrown, and the good records are the ones the
// failing read returned before its error (all of them without one);
// build_index agrees with the failing read (same records, or the same
// error at the same offset), and each indexed record reads back by offset
// to the same bytes; parse_example either parses a record or says why not,
// and a parsed record rebuilds to bytes that parse to the same features.
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/data/example.h"
#include "cohort/data/record_index.h"
#include "cohort/data/record_reader.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::data;

int fuzz_one(const uint8_t* data, size_t size) {
  auto file = memory_file_view("fuzzed.tfrecord", {data, size});

  std::vector<std::string> records;
  int64_t error_offset = -1;
  try {
    RecordReader reader(file, {.buffer_bytes = 64});  // small: records straddle refills
    while (auto r = reader.next()) records.emplace_back(r->begin(), r->end());
  } catch (const CorruptRecordError& e) {
    FUZZ_CHECK(e.offset() < size);
    error_offset = int64_t(e.offset());
  }

  RecordReader skipping(file, {.on_bad_record = OnBadRecord::skip});
  std::vector<std::string> kept;
  while (auto r = skipping.next()) kept.emplace_back(r->begin(), r->end());
  FUZZ_CHECK((skipping.bad_records() == 0) == (error_offset < 0));
  FUZZ_CHECK(kept.size() >= records.size());
  for (size_t i = 0; i < records.size(); ++i) FUZZ_CHECK(kept[i] == records[i]);

  try {
    const RecordIndex index = build_index(file);
    FUZZ_CHECK(error_offset < 0 && index.records() == records.size() && index.file_size() == size);
    std::vector<uint8_t> bytes;
    for (uint64_t i = 0; i < index.records(); ++i) {
      read_record_at(*file, index.offset(i), index.frame_size(i), bytes);
      FUZZ_CHECK(std::string(bytes.begin(), bytes.end()) == records[i]);
    }
  } catch (const CorruptRecordError& e) {
    FUZZ_CHECK(int64_t(e.offset()) == error_offset);
  }

  for (const std::string& r : kept) {
    Features features;
    std::string error;
    const auto* p = reinterpret_cast<const uint8_t*>(r.data());
    if (!parse_example({p, r.size()}, features, &error)) {
      FUZZ_CHECK(!error.empty());
      continue;
    }
    const std::string rebuilt = build_example(features);
    Features again;
    FUZZ_CHECK(parse_example({reinterpret_cast<const uint8_t*>(rebuilt.data()), rebuilt.size()}, again));
    FUZZ_CHECK(again == features);
  }
  return 0;
}

#ifndef COHORT_FUZZ_NO_ENTRY_POINT
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_one(data, size); }
#endif
