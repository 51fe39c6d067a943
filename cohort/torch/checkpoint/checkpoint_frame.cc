#include "cohort/torch/checkpoint/checkpoint_frame.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr uint32_t kVersion = 1;

uint32_t crc32_of(const void* data, size_t n) { return crc32_update(0, data, n); }

template <typename T>
void put(std::array<char, kCheckpointHeaderBytes>& h, size_t offset, T v) {
  std::memcpy(h.data() + offset, &v, sizeof v);
}

template <typename T>
T get(const char* h, size_t offset) {
  T v;
  std::memcpy(&v, h + offset, sizeof v);
  return v;
}

}  // namespace

const char* checkpoint_kind_name(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::archive: return "a checkpoint";
    case CheckpointKind::shard: return "one rank's shard of a sharded checkpoint";
    case CheckpointKind::manifest: return "the manifest of a sharded checkpoint";
  }
  return "of an unknown kind";
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's length is a uInt: feed large payloads in pieces.
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

std::array<char, kCheckpointHeaderBytes> checkpoint_header(const CheckpointHeader& h) {
  std::array<char, kCheckpointHeaderBytes> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put<uint32_t>(header, 8, kVersion);
  put<uint32_t>(header, 12, static_cast<uint32_t>(h.kind));
  put<uint64_t>(header, 16, h.payload_bytes);
  put<uint32_t>(header, 24, h.payload_crc);
  put<uint32_t>(header, 28, crc32_of(header.data(), 28));
  return header;
}

std::array<char, kCheckpointHeaderBytes> checkpoint_header(const std::vector<char>& payload, CheckpointKind kind) {
  return checkpoint_header({.kind = kind, .payload_bytes = payload.size(),
                            .payload_crc = crc32_of(payload.data(), payload.size())});
}

CheckpointHeader parse_checkpoint_header(const char* header, uint64_t file_bytes, const std::string& unusable) {
  COHORT_CHECK_AS(ConfigError, file_bytes >= kCheckpointHeaderBytes)
      << unusable << ": truncated: " << file_bytes << " bytes, shorter than the " << kCheckpointHeaderBytes
      << "-byte header";
  COHORT_CHECK_AS(ConfigError, std::memcmp(header, kMagic, sizeof kMagic) == 0)
      << unusable << ": not a cohort checkpoint (bad magic)";
  COHORT_CHECK_AS(ConfigError, get<uint32_t>(header, 28) == crc32_of(header, 28))
      << unusable << ": corrupt header (checksum mismatch)";
  const auto version = get<uint32_t>(header, 8);
  COHORT_CHECK_AS(ConfigError, version == kVersion)
      << unusable << ": format version " << version << ", this build reads version " << kVersion;
  const auto kind = get<uint32_t>(header, 12);
  COHORT_CHECK_AS(ConfigError, kind <= static_cast<uint32_t>(CheckpointKind::manifest))
      << unusable << ": unknown kind of payload " << kind;
  const auto payload = get<uint64_t>(header, 16);
  const uint64_t present = file_bytes - kCheckpointHeaderBytes;
  COHORT_CHECK_AS(ConfigError, present >= payload)
      << unusable << ": truncated: the header announces " << payload << " payload bytes, the file holds "
      << present;
  COHORT_CHECK_AS(ConfigError, present == payload)
      << unusable << ": " << (present - payload) << " unexpected bytes after the payload";
  return {.kind = static_cast<CheckpointKind>(kind),
          .payload_bytes = payload,
          .payload_crc = get<uint32_t>(header, 24)};
}

std::vector<char> checkpoint_payload(std::vector<char> file, const std::string& unusable) {
  const CheckpointHeader header = parse_checkpoint_header(file.data(), file.size(), unusable);
  COHORT_CHECK_AS(ConfigError, crc32_of(file.data() + kCheckpointHeaderBytes, header.payload_bytes) ==
                                   header.payload_crc)
      << unusable << ": corrupt payload (checksum mismatch)";
  COHORT_CHECK_AS(ConfigError, header.kind == CheckpointKind::archive)
      << unusable << ": it is " << checkpoint_kind_name(header.kind)
      << " (load the checkpoint's directory with load_sharded_checkpoint)";
  file.erase(file.begin(), file.begin() + kCheckpointHeaderBytes);
  return file;
}

}  // namespace cohort
