// TFRecord framing, the sidecar index and tf.train.Example: round trips,
// and every kind of damage reported with the file and the frame's byte
// offset (or skipped and counted under OnBadRecord::skip).
#include <gtest/gtest.h>

#include <cstring>

#include "cohort/data/crc32c.h"
#include "cohort/data/example.h"
#include "cohort/data/record_reader.h"
#include "cohort/data/record_source.h"
#include "cohort/data/record_writer.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::records_test {
namespace {

using testing::error_of;
using testing::slurp;
using testing::spit;
using testing::TempDir;

// Record i: i * 37 % 300 bytes (some empty), one > the reader's buffer.
std::string record(size_t i) {
  const size_t n = i == 5 ? 3000 : i * 37 % 300;
  std::string r(n, '\0');
  for (size_t j = 0; j < n; ++j) r[j] = char((i * 31 + j * 7) % 251);
  return r;
}

std::string write_records(const TempDir& dir, const std::string& name, size_t count) {
  const std::string path = dir.file(name);
  RecordWriter w(path);
  for (size_t i = 0; i < count; ++i) w.write(record(i));
  w.close();
  return path;
}

std::vector<std::string> read_all(const std::string& path, RecordReaderOptions options = {}) {
  options.buffer_bytes = 1024;  // small, so records straddle refills
  RecordReader r(path, options);
  std::vector<std::string> out;
  while (auto rec = r.next()) out.emplace_back(rec->begin(), rec->end());
  return out;
}

TEST(Records, FramingIsTensorFlows) {
  TempDir dir;
  const std::string path = dir.file("one.tfrecord");
  RecordWriter w(path);
  w.write(std::string("abc"));
  w.close();
  const auto bytes = slurp(path);
  ASSERT_EQ(bytes.size(), 3u + 16u);
  // Length 3 as a little-endian u64, its masked CRC, the data, the data's masked CRC.
  const uint8_t length[8] = {3, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(bytes.data(), length, 8), 0);
  auto le32 = [&](size_t at) {
    return uint32_t(bytes[at]) | uint32_t(bytes[at + 1]) << 8 | uint32_t(bytes[at + 2]) << 16 |
           uint32_t(bytes[at + 3]) << 24;
  };
  EXPECT_EQ(le32(8), mask_crc(crc32c(length, 8)));
  EXPECT_EQ(std::string(bytes.begin() + 12, bytes.begin() + 15), "abc");
  EXPECT_EQ(le32(15), mask_crc(crc32c("abc", 3)));
}

TEST(Records, RoundTripSequentialAndIndexed) {
  TempDir dir;
  const std::string path = write_records(dir, "a.tfrecord", 40);
  const auto records = read_all(path);
  ASSERT_EQ(records.size(), 40u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(records[i], record(i)) << i;

  // The sidecar equals a scan, and reads any record directly.
  auto file = open_file(path);
  const RecordIndex index = load_index(index_path(path), path, file->size());
  EXPECT_EQ(index, build_index(file));
  ASSERT_EQ(index.records(), 40u);
  std::vector<uint8_t> data;
  for (size_t i : {39, 0, 5, 17}) {
    read_record_at(*file, index.offset(i), index.frame_size(i), data);
    EXPECT_EQ(std::string(data.begin(), data.end()), record(i)) << i;
  }
  // The index text is DALI's "offset size" lines.
  const auto text = slurp(index_path(path));
  EXPECT_EQ(std::string(text.begin(), text.begin() + 6), "0 16\n1");  // record 0 is empty
}

TEST(Records, AnUnclosedWriterLeavesNothing) {
  TempDir dir;
  {
    RecordWriter w(dir.file("x.tfrecord"));
    w.write(std::string("data"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Records, DataCorruptionNamesTheRecordOffset) {
  TempDir dir;
  const std::string path = write_records(dir, "a.tfrecord", 10);
  auto bytes = slurp(path);
  const RecordIndex index = build_index(open_file(path));
  const uint64_t victim = index.offset(7);
  bytes[victim + 12 + 4] ^= 0x20;  // a data byte of record 7
  spit(path, bytes);

  const std::string error = error_of<CorruptRecordError>([&] { read_all(path); });
  EXPECT_NE(error.find(path + ": corrupt record at byte offset " + std::to_string(victim) + ": data CRC mismatch"),
            std::string::npos)
      << error;
  try {
    read_all(path);
  } catch (const CorruptRecordError& e) {
    EXPECT_EQ(e.offset(), victim);
    EXPECT_EQ(e.file(), path);
  }
  // The indexed read finds the same damage.
  std::vector<uint8_t> data;
  EXPECT_NE(error_of<CorruptRecordError>([&] {
              read_record_at(*open_file(path), victim, index.frame_size(7), data);
            }).find("byte offset " + std::to_string(victim) + ": data CRC mismatch"),
            std::string::npos);

  // skip: the one record is counted and passed over.
  RecordReader r(path, {.on_bad_record = OnBadRecord::skip});
  std::vector<std::string> got;
  while (auto rec = r.next()) got.emplace_back(rec->begin(), rec->end());
  EXPECT_EQ(got.size(), 9u);
  EXPECT_EQ(r.bad_records(), 1u);
  EXPECT_EQ(got[7], record(8));
  EXPECT_NE(r.first_error().find("byte offset " + std::to_string(victim)), std::string::npos);
}

TEST(Records, LengthCorruptionEndsTheFile) {
  TempDir dir;
  const std::string path = write_records(dir, "a.tfrecord", 10);
  auto bytes = slurp(path);
  const RecordIndex index = build_index(open_file(path));
  const uint64_t victim = index.offset(4);
  bytes[victim + 1] ^= 0x01;  // the length of record 4
  spit(path, bytes);
  EXPECT_NE(error_of<CorruptRecordError>([&] { read_all(path); })
                .find("byte offset " + std::to_string(victim) + ": length CRC mismatch"),
            std::string::npos);
  RecordReader r(path, {.on_bad_record = OnBadRecord::skip});
  size_t good = 0;
  while (r.next()) ++good;
  EXPECT_EQ(good, 4u);
  EXPECT_EQ(r.bad_records(), 1u);
}

TEST(Records, TruncationNamesTheLastFrame) {
  TempDir dir;
  const std::string path = write_records(dir, "a.tfrecord", 10);
  auto bytes = slurp(path);
  const RecordIndex index = build_index(open_file(path));
  for (uint64_t cut : {index.offset(9) + 5, index.offset(9) + 13, index.file_size() - 1}) {
    spit(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(cut)));
    const std::string error = error_of<CorruptRecordError>([&] { read_all(path); });
    EXPECT_NE(error.find("byte offset " + std::to_string(index.offset(9)) + ": truncated"), std::string::npos)
        << error;
  }
}

TEST(Records, StaleOrMalformedIndexIsRefused) {
  TempDir dir;
  const std::string path = write_records(dir, "a.tfrecord", 6);
  const uint64_t size = open_file(path)->size();
  auto write_text = [&](const std::string& text) { spit(index_path(path), {text.begin(), text.end()}); };

  write_text("0 16\nx\n");
  EXPECT_NE(error_of<ConfigError>([&] { load_index(index_path(path), path, size); }).find("line 2: expected"),
            std::string::npos);
  write_text("0 16\n20 30\n");
  EXPECT_NE(error_of<ConfigError>([&] { load_index(index_path(path), path, size); })
                .find("record starts at 20, expected 16"),
            std::string::npos);
  write_text("0 16\n");
  EXPECT_NE(error_of<ConfigError>([&] { load_index(index_path(path), path, size); })
                .find("covers 16 bytes but " + path),
            std::string::npos);

  // Consistent with the file size but wrong frames: the read catches it.
  const RecordIndex good = build_index(open_file(path));
  std::vector<uint64_t> starts{0, good.offset(2), good.file_size()};
  const RecordIndex wrong(starts);
  std::vector<uint8_t> data;
  EXPECT_NE(error_of<CorruptRecordError>([&] {
              read_record_at(*open_file(path), 0, wrong.frame_size(0), data);
            }).find("the index says"),
            std::string::npos);
}

TEST(Records, EmptyFileHasNoRecordsAndEmptySourceIsAnError) {
  TempDir dir;
  spit(dir.file("empty.tfrecord"), {});
  EXPECT_TRUE(read_all(dir.file("empty.tfrecord")).empty());
  EXPECT_NE(error_of<ConfigError>([&] { RecordSource({dir.file("empty.tfrecord")}); }).find("holds no records"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] { list_record_files(dir.file("nope")); }).find("no such file"),
            std::string::npos);
}

TEST(Example, RoundTripAllKinds) {
  Features f;
  f.set("label", Feature::of(std::vector<int64_t>{7, -3, int64_t(1) << 40}));
  f.set("weights", Feature::of(std::vector<float>{0.5f, -1.25f}));
  f.set("text", Feature::bytes({"hello", std::string("\0x", 2)}));
  f.set("empty", Feature::bytes({}));
  const std::string bytes = build_example(f);
  Features back;
  std::string error;
  ASSERT_TRUE(parse_example({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, back, &error)) << error;
  // Parsed features come in name order.
  EXPECT_EQ(back.names(), "empty, label, text, weights");
  for (const auto& [name, feature] : f) EXPECT_EQ(back.at(name), feature) << name;
  // Deterministic bytes: the same features in another order build the same record.
  Features reordered;
  for (const char* n : {"weights", "empty", "text", "label"}) reordered.set(n, f.at(n));
  EXPECT_EQ(build_example(reordered), bytes);
}

TEST(Example, U8IsStoredAsBytesAndOtherDenseTypesAreRefused) {
  Features f;
  f.set("pixels", Feature::of(std::vector<uint8_t>{1, 2, 255}));
  const std::string bytes = build_example(f);
  Features back;
  ASSERT_TRUE(parse_example({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, back));
  EXPECT_EQ(back.at("pixels").strings(), std::vector<std::string>{std::string("\x01\x02\xff", 3)});
  Features bad;
  bad.set("d", Feature::of(std::vector<double>{1.0}));
  EXPECT_NE(error_of<ConfigError>([&] { build_example(bad); }).find("holds only bytes, f32, i64"), std::string::npos);
}

TEST(Example, BadProtobufNamesFileRecordAndOffset) {
  TempDir dir;
  const std::string path = dir.file("bad.tfrecord");
  {
    RecordWriter w(path);
    Features f;
    f.set("x", Feature::scalar<int64_t>(1));
    w.write(build_example(f));
    w.write(std::string("\x0a\xff\xff\xff\xff\x0f garbage", 15));  // a length that runs off the end
    w.close();
  }
  RecordSource source({path});
  ASSERT_EQ(source.size(), 2u);
  EXPECT_EQ(source.read(0)["x"].values<int64_t>()[0], 1);
  const uint64_t offset = build_index(open_file(path)).offset(1);
  const std::string error = error_of<BadRecordError>([&] { source.read(1); });
  EXPECT_NE(error.find(path + ": record 1 at byte offset " + std::to_string(offset) + ": not a valid tf.train.Example"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace cohort::data::records_test
