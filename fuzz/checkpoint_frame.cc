// libFuzzer harness: the checkpoint file reader's verification of a file's
// framing (cohort/torch/checkpoint/checkpoint_frame.h), which meets whatever
// a crash, a full disk or a stranger left at the checkpoint path.
//
// Input: byte 0 picks the mode, the rest is the data.
//   even: the data is a whole file.
//   odd:  the data is a payload, framed correctly and then damaged: byte 1
//         (if any) is an offset into the framed file (modulo its size) whose
//         byte is flipped when byte 2 is odd, or where the file is cut when
//         byte 2 is even; the payload is what follows.
//
// Properties, besides the sanitizers': ConfigError is the only failure, its
// message starts with the caller's "unusable" text; an accepted file is
// exactly the header of its payload followed by the payload (so nothing but
// a correctly framed payload is ever accepted); a correctly framed payload
// is accepted unchanged, and one flipped byte or one cut is refused.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/torch/checkpoint/checkpoint_frame.h"
#include "fuzz/fuzz_check.h"

namespace {

const std::string kUnusable = "checkpoint fuzzed is unusable";

std::vector<char> framed(const std::vector<char>& payload) {
  const auto header = cohort::checkpoint_header(payload);
  std::vector<char> file(header.begin(), header.end());
  file.insert(file.end(), payload.begin(), payload.end());
  return file;
}

// The payload, or nullopt-like false when refused (checking the error).
bool read(const std::vector<char>& file, std::vector<char>& payload) {
  try {
    payload = cohort::checkpoint_payload(file, kUnusable);
    return true;
  } catch (const cohort::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).substr(0, kUnusable.size()) == kUnusable);
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool damage = data[0] & 1;
  const char* rest = reinterpret_cast<const char*>(data) + 1;
  std::vector<char> payload;
  if (!damage) {
    const std::vector<char> file(rest, rest + size - 1);
    if (read(file, payload)) FUZZ_CHECK(framed(payload) == file);
    return 0;
  }
  const uint8_t offset = size > 1 ? data[1] : 0;
  const bool flip = size > 2 && (data[2] & 1);
  const size_t skip = size > 2 ? 3 : size;
  const auto* bytes = reinterpret_cast<const char*>(data);
  const std::vector<char> original(bytes + skip, bytes + size);
  std::vector<char> file = framed(original);
  FUZZ_CHECK(read(file, payload) && payload == original);
  const size_t at = offset % file.size();
  if (flip)
    file[at] = char(file[at] ^ 0x01);
  else
    file.resize(at);
  // A single flipped bit is caught by a CRC-32 (or the magic, version or
  // size checks); so is any cut.
  FUZZ_CHECK(!read(file, payload));
  return 0;
}
