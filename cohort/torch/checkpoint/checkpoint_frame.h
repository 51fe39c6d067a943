// The framing of a checkpoint file (checkpoint.h's file comment): a 32-byte
// header with magic, version, payload size and two CRC-32s, then the payload.
// Torch-free (zlib only), so that the reader that meets damaged files is
// fuzzed on its own (fuzz/checkpoint_frame.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort {

inline constexpr size_t kCheckpointHeaderBytes = 32;

// What a file's payload is (the header's flags field).
enum class CheckpointKind : uint32_t {
  archive = 0,   // a LibTorch archive (checkpoint.h)
  shard = 1,     // one rank's records of a sharded checkpoint (sharded_checkpoint.h)
  manifest = 2,  // a sharded checkpoint's list of shards
};
const char* checkpoint_kind_name(CheckpointKind kind);

struct CheckpointHeader {
  CheckpointKind kind = CheckpointKind::archive;
  uint64_t payload_bytes = 0;
  uint32_t payload_crc = 0;  // CRC-32 (zlib) of the payload
};

// zlib's CRC-32 continued over `n` more bytes (start from 0).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

std::array<char, kCheckpointHeaderBytes> checkpoint_header(const CheckpointHeader& header);
// The header that frames `payload`.
std::array<char, kCheckpointHeaderBytes> checkpoint_header(const std::vector<char>& payload,
                                                           CheckpointKind kind = CheckpointKind::archive);

// A file's header, verified (magic, header CRC, version, and that a file of
// `file_bytes` holds exactly the payload it announces); the payload's CRC is
// the caller's to check. ConfigError starting with `unusable` otherwise.
CheckpointHeader parse_checkpoint_header(const char* header, uint64_t file_bytes, const std::string& unusable);

// The payload of a whole file's bytes, verified: size, magic, header CRC,
// version, payload size and payload CRC. Otherwise a ConfigError that starts
// with `unusable` ("checkpoint X is unusable (...)") and says what is wrong.
std::vector<char> checkpoint_payload(std::vector<char> file, const std::string& unusable);

}  // namespace cohort
