// libFuzzer harness: IDX files, plain or gzip (cohort/data/idx_reader.h).
//
// Input: byte 0 picks the expected number of dimensions (1 + byte % 4), the
// rest is the file.
//
// Properties, besides the sanitizers': ConfigError is the only failure; a
// parsed array has the expected dimensions, none zero, and exactly their
// product of bytes; the same array written back as a plain IDX file parses
// to itself.
#include <cstdint>
#include <string_view>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/data/idx_reader.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::data;

int fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t dims = 1 + data[0] % 4;
  IdxArray array;
  try {
    array = parse_idx({data + 1, size - 1}, dims, "fuzzed.idx");
  } catch (const cohort::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).find("fuzzed.idx") != std::string_view::npos);
    return 0;
  }
  FUZZ_CHECK(array.dims.size() == dims);
  uint64_t elements = 1;
  for (uint32_t d : array.dims) {
    FUZZ_CHECK(d > 0);
    elements *= d;
  }
  FUZZ_CHECK(array.data.size() == elements);
  std::vector<uint8_t> plain = {0, 0, 8, uint8_t(dims)};
  for (uint32_t d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8) plain.push_back(uint8_t(d >> shift));
  plain.insert(plain.end(), array.data.begin(), array.data.end());
  const IdxArray again = parse_idx(plain, dims, "rewritten.idx");
  FUZZ_CHECK(again.dims == array.dims && again.data == array.data);
  return 0;
}

#ifndef COHORT_FUZZ_NO_ENTRY_POINT
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_one(data, size); }
#endif
