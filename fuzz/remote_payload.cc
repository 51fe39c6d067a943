// libFuzzer harness: the payload a remote rank reads from its launch
// command's standard input (cohort/launcher/remote_payload.h), which carries
// the job secret and the rank's command line.
//
// Input: the bytes on standard input.
//
// Properties, besides the sanitizers': cohort::Error is the only failure (any
// other exception escapes and counts as a crash); a decoded payload encodes
// to bytes that decode to the same payload.
#include <cstdint>
#include <string_view>

#include "cohort/common/error.h"
#include "cohort/launcher/remote_payload.h"
#include "fuzz/fuzz_check.h"

using namespace cohort::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RemotePayload payload;
  try {
    payload = decode_payload(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const cohort::Error&) {
    return 0;
  }
  FUZZ_CHECK(!payload.argv.empty());
  FUZZ_CHECK(decode_payload(encode_payload(payload)) == payload);
  return 0;
}
