#include "examples/fashion_mnist/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "cohort/common/check.h"

namespace cohort::examples {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes; fewer only at the end of the data. A damaged gzip
// stream (bad header, corrupt deflate data, CRC or length mismatch at the
// end) throws.
size_t read_some(gzFile f, void* out, size_t n, const std::string& path) {
  size_t done = 0;
  auto* p = static_cast<unsigned char*>(out);
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int r = gzread(f, p + done, chunk);
    int errnum = Z_OK;
    const char* message = gzerror(f, &errnum);
    // Z_BUF_ERROR is zlib's "unexpected end of file": a truncated stream,
    // reported by the callers below as truncation of the IDX data.
    COHORT_CHECK_AS(ConfigError, r >= 0 && (errnum == Z_OK || errnum == Z_BUF_ERROR))
        << path << ": corrupt gzip stream: " << (errnum == Z_ERRNO ? std::strerror(errno) : message);
    if (r == 0) break;
    done += size_t(r);
  }
  return done;
}

}  // namespace

IdxArray read_idx(const std::string& path, size_t expected_dims) {
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  COHORT_CHECK_AS(ConfigError, file != nullptr)
      << "cannot open " << path << ": " << (errno ? std::strerror(errno) : "out of memory");
  gzFile f = file.get();

  unsigned char magic[4];
  const size_t got = read_some(f, magic, 4, path);
  COHORT_CHECK_AS(ConfigError, got == 4) << path << ": truncated: " << got << " bytes, shorter than an IDX header";
  COHORT_CHECK_AS(ConfigError, magic[0] == 0 && magic[1] == 0)
      << path << ": not an IDX file (bad magic 0x" << std::hex << (unsigned(magic[0]) << 24 | unsigned(magic[1]) << 16 |
                                                                     unsigned(magic[2]) << 8 | unsigned(magic[3]))
      << ", expected 0x000008" << (expected_dims < 16 ? "0" : "") << expected_dims << ")";
  COHORT_CHECK_AS(ConfigError, magic[2] == 0x08)
      << path << ": element type 0x" << std::hex << unsigned(magic[2])
      << " is not supported (only unsigned bytes, 0x08)";
  COHORT_CHECK_AS(ConfigError, magic[3] == expected_dims)
      << path << ": " << unsigned(magic[3]) << " dimensions, expected " << expected_dims;

  IdxArray array;
  uint64_t elements = 1;
  for (size_t d = 0; d < expected_dims; ++d) {
    unsigned char be[4];
    const size_t n = read_some(f, be, 4, path);
    COHORT_CHECK_AS(ConfigError, n == 4) << path << ": truncated in the size of dimension " << d;
    const uint32_t dim = uint32_t(be[0]) << 24 | uint32_t(be[1]) << 16 | uint32_t(be[2]) << 8 | uint32_t(be[3]);
    COHORT_CHECK_AS(ConfigError, dim > 0) << path << ": dimension " << d << " is 0";
    elements *= dim;
    COHORT_CHECK_AS(ConfigError, elements <= kMaxIdxElements)
        << path << ": implausible size: more than " << kMaxIdxElements << " elements";
    array.dims.push_back(dim);
  }
  array.data.resize(size_t(elements));
  const size_t n = read_some(f, array.data.data(), array.data.size(), path);
  COHORT_CHECK_AS(ConfigError, n == array.data.size())
      << path << ": truncated: the header announces " << elements << " bytes of data, the file holds " << n;
  unsigned char extra;
  // Reading past the data also makes zlib check the gzip trailer (CRC-32
  // and length), so a corrupt stream cannot pass as a complete one.
  COHORT_CHECK_AS(ConfigError, read_some(f, &extra, 1, path) == 0)
      << path << ": unexpected bytes after the " << elements << " data bytes";
  int errnum = Z_OK;
  const char* message = gzerror(f, &errnum);
  COHORT_CHECK_AS(ConfigError, errnum == Z_OK)
      << path << ": truncated gzip stream (" << message << ")";
  return array;
}

}  // namespace cohort::examples
