#include "cohort/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/data/random_access_file.h"

namespace cohort::data {
namespace {

// Bytes of an IDX file, plain or gzip, read front to back. For gzip, read()
// returns fewer bytes than asked only at the end of the data; a damaged
// stream throws, and complete() tells whether the stream ended properly
// (trailer present and checked).
class ByteStream {
 public:
  ByteStream(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {
    gzip_ = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
    if (gzip_) {
      // 15 + 16: a zlib window of 2^15 and a gzip (not zlib) wrapper.
      COHORT_CHECK(inflateInit2(&z_, 15 + 16) == Z_OK) << name_ << ": zlib initialisation failed";
      z_.next_in = const_cast<Bytef*>(bytes.data());
      z_.avail_in = uInt(std::min<size_t>(bytes.size(), UINT32_MAX));
    }
  }
  ~ByteStream() {
    if (gzip_) inflateEnd(&z_);
  }

  size_t read(uint8_t* out, size_t n) {
    if (!gzip_) {
      const size_t k = std::min(n, bytes_.size() - plain_pos_);
      if (k) std::memcpy(out, bytes_.data() + plain_pos_, k);  // an empty file has no data pointer
      plain_pos_ += k;
      return k;
    }
    size_t done = 0;
    while (done < n && !ended_) {
      z_.next_out = out + done;
      z_.avail_out = uInt(std::min<size_t>(n - done, 1u << 30));
      const uInt before = z_.avail_out;
      const int r = inflate(&z_, Z_NO_FLUSH);
      done += before - z_.avail_out;
      if (r == Z_STREAM_END) {
        // Another gzip member may follow (gzip -c a b > c); read on into it.
        if (z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b) {
          inflateReset(&z_);
          continue;
        }
        ended_ = true;
        complete_ = true;
        trailing_garbage_ = z_.avail_in > 0;
        break;
      }
      if (r == Z_BUF_ERROR || (r == Z_OK && z_.avail_in == 0 && before == z_.avail_out)) {
        ended_ = true;  // input exhausted before the stream's end: truncated
        break;
      }
      COHORT_CHECK_AS(ConfigError, r == Z_OK)
          << name_ << ": corrupt gzip stream: " << (z_.msg ? z_.msg : "inflate error " + std::to_string(r));
    }
    return done;
  }

  bool gzip() const { return gzip_; }
  bool complete() const { return !gzip_ || complete_; }
  bool trailing_garbage() const { return trailing_garbage_; }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& name_;
  bool gzip_ = false;
  z_stream z_{};
  size_t plain_pos_ = 0;
  bool ended_ = false;
  bool complete_ = false;
  bool trailing_garbage_ = false;
};

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, size_t expected_dims, const std::string& name) {
  ByteStream in(bytes, name);
  unsigned char magic[4];
  const size_t got = in.read(magic, 4);
  COHORT_CHECK_AS(ConfigError, got == 4) << name << ": truncated: " << got << " bytes, shorter than an IDX header";
  COHORT_CHECK_AS(ConfigError, magic[0] == 0 && magic[1] == 0)
      << name << ": not an IDX file (bad magic 0x" << std::hex
      << (unsigned(magic[0]) << 24 | unsigned(magic[1]) << 16 | unsigned(magic[2]) << 8 | unsigned(magic[3]))
      << ", expected 0x000008" << (expected_dims < 16 ? "0" : "") << expected_dims << ")";
  COHORT_CHECK_AS(ConfigError, magic[2] == 0x08)
      << name << ": element type 0x" << std::hex << unsigned(magic[2])
      << " is not supported (only unsigned bytes, 0x08)";
  COHORT_CHECK_AS(ConfigError, magic[3] == expected_dims)
      << name << ": " << unsigned(magic[3]) << " dimensions, expected " << expected_dims;

  IdxArray array;
  uint64_t elements = 1;
  for (size_t d = 0; d < expected_dims; ++d) {
    unsigned char be[4];
    const size_t n = in.read(be, 4);
    COHORT_CHECK_AS(ConfigError, n == 4) << name << ": truncated in the size of dimension " << d;
    const uint32_t dim = uint32_t(be[0]) << 24 | uint32_t(be[1]) << 16 | uint32_t(be[2]) << 8 | uint32_t(be[3]);
    COHORT_CHECK_AS(ConfigError, dim > 0) << name << ": dimension " << d << " is 0";
    elements *= dim;
    COHORT_CHECK_AS(ConfigError, elements <= kMaxIdxElements)
        << name << ": implausible size: more than " << kMaxIdxElements << " elements";
    array.dims.push_back(dim);
  }
  // A plain file's size is known: refuse a short one before allocating.
  if (!in.gzip()) {
    COHORT_CHECK_AS(ConfigError, bytes.size() - 4 - 4 * expected_dims >= elements)
        << name << ": truncated: the header announces " << elements << " bytes of data, the file holds "
        << bytes.size() - 4 - 4 * expected_dims;
  }
  // Read in chunks, growing the buffer as data arrives: a gzip header may
  // announce far more than its stream holds, and the allocation should
  // follow the data, not the claim. Chunks double from 64 KiB, so the
  // allocation stays within twice the data read.
  size_t n = 0;
  while (n < elements) {
    const size_t want = std::min<size_t>(size_t(elements) - n, std::max<size_t>(n, size_t(64) << 10));
    array.data.resize(n + want);
    const size_t got = in.read(array.data.data() + n, want);
    n += got;
    if (got < want) break;
  }
  array.data.resize(n);
  COHORT_CHECK_AS(ConfigError, n == elements)
      << name << ": truncated: the header announces " << elements << " bytes of data, the file holds " << n;
  unsigned char extra;
  // Reading past the data also makes zlib check the gzip trailer (CRC-32
  // and length), so a corrupt stream cannot pass as a complete one.
  COHORT_CHECK_AS(ConfigError, in.read(&extra, 1) == 0 && !in.trailing_garbage())
      << name << ": unexpected bytes after the " << elements << " data bytes";
  COHORT_CHECK_AS(ConfigError, in.complete()) << name << ": truncated gzip stream (unexpected end of file)";
  return array;
}

IdxArray read_idx(const std::string& path, size_t expected_dims) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  return parse_idx(bytes, expected_dims, path);
}

}  // namespace cohort::data
