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

uint32_t crc32_of(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's length is a uInt: feed large payloads in pieces.
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

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

std::array<char, kCheckpointHeaderBytes> checkpoint_header(const std::vector<char>& payload) {
  std::array<char, kCheckpointHeaderBytes> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put<uint32_t>(header, 8, kVersion);
  put<uint32_t>(header, 12, 0);
  put<uint64_t>(header, 16, payload.size());
  put<uint32_t>(header, 24, crc32_of(payload.data(), payload.size()));
  put<uint32_t>(header, 28, crc32_of(header.data(), 28));
  return header;
}

std::vector<char> checkpoint_payload(std::vector<char> file, const std::string& unusable) {
  COHORT_CHECK_AS(ConfigError, file.size() >= kCheckpointHeaderBytes)
      << unusable << ": truncated: " << file.size() << " bytes, shorter than the " << kCheckpointHeaderBytes
      << "-byte header";
  COHORT_CHECK_AS(ConfigError, std::memcmp(file.data(), kMagic, sizeof kMagic) == 0)
      << unusable << ": not a cohort checkpoint (bad magic)";
  COHORT_CHECK_AS(ConfigError, get<uint32_t>(file.data(), 28) == crc32_of(file.data(), 28))
      << unusable << ": corrupt header (checksum mismatch)";
  const auto version = get<uint32_t>(file.data(), 8);
  COHORT_CHECK_AS(ConfigError, version == kVersion)
      << unusable << ": format version " << version << ", this build reads version " << kVersion;
  const auto payload = get<uint64_t>(file.data(), 16);
  const size_t present = file.size() - kCheckpointHeaderBytes;
  COHORT_CHECK_AS(ConfigError, present >= payload)
      << unusable << ": truncated: the header announces " << payload << " payload bytes, the file holds "
      << present;
  COHORT_CHECK_AS(ConfigError, present == payload)
      << unusable << ": " << (present - payload) << " unexpected bytes after the payload";
  const uint32_t payload_crc = crc32_of(file.data() + kCheckpointHeaderBytes, payload);
  COHORT_CHECK_AS(ConfigError, get<uint32_t>(file.data(), 24) == payload_crc)
      << unusable << ": corrupt payload (checksum mismatch)";
  file.erase(file.begin(), file.begin() + kCheckpointHeaderBytes);
  return file;
}

}  // namespace cohort
