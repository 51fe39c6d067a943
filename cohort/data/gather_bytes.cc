#include "cohort/data/gather_bytes.h"

#include <cstring>
#include <string>

#include "cohort/common/check.h"

namespace cohort::data {

namespace {

std::vector<std::vector<uint8_t>> split(const uint8_t* all, std::span<const size_t> counts) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t c : counts) {
    out.emplace_back(all, all + c);
    all += c;
  }
  return out;
}

}  // namespace

AllgatherBytes allgather_over(comm::Communicator& comm) {
  return [&comm](std::span<const uint8_t> mine) {
    const size_t world = size_t(comm.size());
    uint64_t length = mine.size();
    std::vector<uint64_t> lengths(world);
    comm.allgather({&length, 1, DType::i64}, {lengths.data(), world, DType::i64});
    const std::vector<size_t> counts(lengths.begin(), lengths.end());
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::vector<uint8_t> all(total);
    comm.allgatherv({const_cast<uint8_t*>(mine.data()), mine.size(), DType::u8}, {all.data(), total, DType::u8},
                    counts);
    return split(all.data(), counts);
  };
}

AllgatherBytes allgather_over(engine::Engine& engine, std::string name) {
  return [&engine, name = std::move(name)](std::span<const uint8_t> mine) {
    engine::Handle h = engine.allgather_async(name, {const_cast<uint8_t*>(mine.data()), mine.size(), DType::u8});
    h.wait();
    return split(static_cast<const uint8_t*>(h.output().data), h.counts());
  };
}

void ByteWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) data_.push_back(uint8_t(v >> (8 * i)));
}

void ByteWriter::f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  u64(bits);
}

void ByteWriter::bytes(std::span<const uint8_t> b) {
  u64(b.size());
  data_.insert(data_.end(), b.begin(), b.end());
}

std::span<const uint8_t> ByteReader::take(size_t n) {
  COHORT_CHECK(n <= data_.size() - pos_) << what_ << ": truncated state (" << data_.size() << " bytes)";
  auto s = data_.subspan(pos_, n);
  pos_ += n;
  return s;
}

uint64_t ByteReader::u64() {
  const auto s = take(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(s[size_t(i)]) << (8 * i);
  return v;
}

double ByteReader::f64() {
  const uint64_t bits = u64();
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

std::span<const uint8_t> ByteReader::bytes() { return take(size_t(u64())); }

std::string ByteReader::str() {
  const auto b = bytes();
  return std::string(b.begin(), b.end());
}

}  // namespace cohort::data
