// Test support: IDX files (plain or gzip) written by the tests themselves,
// valid or deliberately damaged.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace cohort::testing {

// The bytes of an IDX file of unsigned bytes with `dims` and `data`.
inline std::vector<char> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<char> b = {0, 0, 8, char(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(char((d >> shift) & 0xff));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline void write_plain(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

inline void write_gzip(const std::string& path, const std::vector<char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!bytes.empty()) gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace cohort::testing
