// TFRecord files and tf.train.Example records against an independent
// implementation (tfrecord_peer.py: the standard library only, its own
// CRC-32C and protobuf wire code): files written here read there, files
// written there read here, and the peer rejects a file damaged here (so its
// checks are real).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "cohort/data/example.h"
#include "cohort/data/record_reader.h"
#include "cohort/data/record_writer.h"
#include "tests/data/temp_dir.h"

namespace cohort::data::roundtrip_test {
namespace {

int peer(const std::string& command, const std::string& path, int n) {
  const std::string line = std::string(COHORT_PYTHON) + " " + COHORT_SOURCE_DIR + "/tests/data/tfrecord_peer.py " +
                           command + " " + path + " " + std::to_string(n);
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The peer's record_bytes(i) and example(i).
std::string record_bytes(int i) {
  std::string r(size_t(i * 37 % 300), '\0');
  for (size_t j = 0; j < r.size(); ++j) r[j] = char((i * 31 + int(j) * 7) % 251);
  return r;
}

Features example(int i) {
  Features f;
  f.set("id", Feature::of(std::vector<int64_t>{i, -i, int64_t(1) << 40}));
  f.set("name", Feature::bytes({"rec-" + std::to_string(i), ""}));
  f.set("weights", Feature::of(std::vector<float>{float(i / 2.0), 0.25f, -1.5f}));
  return f;
}

constexpr int kRecords = 60;

TEST(RoundTrip, RecordsWrittenByThePeerReadHere) {
  testing::TempDir dir;
  const std::string path = dir.file("peer.tfrecord");
  ASSERT_EQ(peer("write-records", path, kRecords), 0);
  RecordReader reader(path);
  int i = 0;
  while (auto r = reader.next()) {
    ASSERT_LT(i, kRecords);
    EXPECT_EQ(std::string(r->begin(), r->end()), record_bytes(i)) << i;
    ++i;
  }
  EXPECT_EQ(i, kRecords);
}

TEST(RoundTrip, RecordsWrittenHereReadByThePeer) {
  testing::TempDir dir;
  const std::string path = dir.file("ours.tfrecord");
  RecordWriter w(path);
  for (int i = 0; i < kRecords; ++i) w.write(record_bytes(i));
  w.close();
  EXPECT_EQ(peer("check-records", path, kRecords), 0);
  // The peer checks CRCs: a damaged byte fails it.
  auto bytes = testing::slurp(path);
  bytes[bytes.size() / 2] ^= 1;
  testing::spit(path, bytes);
  EXPECT_EQ(peer("check-records", path, kRecords), 1);
}

TEST(RoundTrip, ExamplesBothWays) {
  testing::TempDir dir;
  const std::string theirs = dir.file("peer_examples.tfrecord");
  ASSERT_EQ(peer("write-examples", theirs, 12), 0);
  RecordReader reader(theirs);
  int i = 0;
  while (auto r = reader.next()) {
    Features f;
    std::string error;
    ASSERT_TRUE(parse_example(*r, f, &error)) << error;
    EXPECT_EQ(f, example(i)) << i;
    ++i;
  }
  EXPECT_EQ(i, 12);

  const std::string ours = dir.file("our_examples.tfrecord");
  RecordWriter w(ours);
  for (int k = 0; k < 12; ++k) w.write(build_example(example(k)));
  w.close();
  EXPECT_EQ(peer("check-examples", ours, 12), 0);
  // A wrong value fails the peer's comparison.
  RecordWriter bad(ours);
  for (int k = 0; k < 12; ++k) {
    Features f = example(k);
    if (k == 7) f.at("id").values<int64_t>()[1] = 5;
    bad.write(build_example(f));
  }
  bad.close();
  EXPECT_EQ(peer("check-examples", ours, 12), 1);
}

}  // namespace
}  // namespace cohort::data::roundtrip_test
