// The IDX reader (cohort/data): valid files (gzip and plain) round-trip, and
// every kind of malformed file is rejected with an error that says what is
// wrong.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "cohort/common/error.h"
#include "cohort/data/idx_reader.h"
#include "tests/data/idx_test_files.h"

namespace cohort::testing::idx_reader_test {
namespace {

using cohort::data::read_idx;

class IdxReader : public ::testing::Test {
 protected:
  IdxReader() {
    char pattern[] = "/tmp/cohort_idx_test.XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  ~IdxReader() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  std::string error_of(const std::string& path, size_t dims) {
    try {
      read_idx(path, dims);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  }

  std::string dir_;
};

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 37 + 11);
  return v;
}

TEST_F(IdxReader, ReadsGzipAndPlainFiles) {
  const auto data = pattern(3 * 4 * 5);
  write_gzip(file("a.gz"), idx_bytes({3, 4, 5}, data));
  write_plain(file("a"), idx_bytes({3, 4, 5}, data));
  for (const char* name : {"a.gz", "a"}) {
    const auto array = read_idx(file(name), 3);
    EXPECT_EQ(array.dims, (std::vector<uint32_t>{3, 4, 5})) << name;
    EXPECT_EQ(array.data, data) << name;
  }
}

TEST_F(IdxReader, RejectsMalformedFiles) {
  const auto good = idx_bytes({4, 3}, pattern(12));
  struct Case {
    std::string name;
    std::vector<char> bytes;
    size_t dims;
    std::string message;
  };
  auto with = [&](size_t at, char value) {
    auto b = good;
    b[at] = value;
    return b;
  };
  auto cut = [&](size_t n) { return std::vector<char>(good.begin(), good.begin() + long(n)); };
  auto longer = good;
  longer.push_back(1);
  const std::vector<Case> cases = {
      {"empty", {}, 2, "truncated: 0 bytes, shorter than an IDX header"},
      {"bad magic", with(0, 0x1f), 2, "not an IDX file (bad magic 0x1f000802"},
      {"float elements", with(2, 0x0d), 2, "element type 0xd is not supported"},
      {"dimensions", good, 3, "2 dimensions, expected 3"},
      {"zero dimension", idx_bytes({0, 3}, {}), 2, "dimension 0 is 0"},
      {"huge", idx_bytes({65536, 65536}, {}), 2, "implausible size"},
      {"cut in sizes", cut(6), 2, "truncated in the size of dimension 0"},
      {"cut in data", cut(good.size() - 1), 2, "truncated: the header announces 12 bytes of data, the file holds 11"},
      {"trailing", longer, 2, "unexpected bytes after the 12 data bytes"},
  };
  for (const Case& c : cases) {
    for (bool gz : {true, false}) {
      const std::string path = file(c.name + (gz ? ".gz" : ""));
      gz ? write_gzip(path, c.bytes) : write_plain(path, c.bytes);
      const std::string error = error_of(path, c.dims);
      EXPECT_NE(error.find(c.message), std::string::npos) << c.name << (gz ? " (gzip)" : "") << ": " << error;
      EXPECT_NE(error.find(path), std::string::npos) << "the error names the file: " << error;
    }
  }
}

TEST_F(IdxReader, RejectsDamagedGzipStreams) {
  const auto data = pattern(5000);
  write_gzip(file("ok.gz"), idx_bytes({50, 100}, data));
  const auto gz = read_file(file("ok.gz"));
  ASSERT_GT(gz.size(), 40u);

  // Cut inside the compressed data: the data comes out short.
  write_plain(file("cut.gz"), std::vector<char>(gz.begin(), gz.begin() + long(gz.size() / 2)));
  EXPECT_NE(error_of(file("cut.gz"), 2).find("truncated"), std::string::npos) << error_of(file("cut.gz"), 2);

  // Cut inside the 8-byte trailer: all data present, stream incomplete.
  write_plain(file("trailer.gz"), std::vector<char>(gz.begin(), gz.end() - 3));
  EXPECT_NE(error_of(file("trailer.gz"), 2).find("truncated gzip stream"), std::string::npos)
      << error_of(file("trailer.gz"), 2);

  // A flipped bit in the CRC-32 of the trailer.
  auto bad_crc = gz;
  bad_crc[gz.size() - 6] ^= 0x04;
  write_plain(file("crc.gz"), bad_crc);
  EXPECT_NE(error_of(file("crc.gz"), 2).find("corrupt gzip stream"), std::string::npos) << error_of(file("crc.gz"), 2);
}

TEST_F(IdxReader, MissingFile) {
  const std::string error = error_of(file("nope.gz"), 1);
  EXPECT_NE(error.find("cannot open " + file("nope.gz")), std::string::npos) << error;
}

}  // namespace
}  // namespace cohort::testing::idx_reader_test
