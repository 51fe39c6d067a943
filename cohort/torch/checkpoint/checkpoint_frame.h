// The framing of a checkpoint file (checkpoint.h's file comment): a 32-byte
// header with magic, version, payload size and two CRC-32s, then the payload.
// Torch-free (zlib only), so that the reader that meets damaged files is
// fuzzed on its own (fuzz/checkpoint_frame.cc).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace cohort {

inline constexpr size_t kCheckpointHeaderBytes = 32;

// The header that frames `payload`.
std::array<char, kCheckpointHeaderBytes> checkpoint_header(const std::vector<char>& payload);

// The payload of a whole file's bytes, verified: size, magic, header CRC,
// version, payload size and payload CRC. Otherwise a ConfigError that starts
// with `unusable` ("checkpoint X is unusable (...)") and says what is wrong.
std::vector<char> checkpoint_payload(std::vector<char> file, const std::string& unusable);

}  // namespace cohort
