// Every rank's byte string, on every rank: one allgather of the lengths and
// one allgatherv of the bytes. What the analyzers and gather_cursor use to
// merge rank-local state that has no fixed size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/comm/communicator.h"

namespace cohort::data {

// Collective over `comm`: result[r] is rank r's `mine`.
std::vector<std::vector<uint8_t>> allgather_bytes(comm::Communicator& comm, std::span<const uint8_t> mine);

// Little-endian fixed-width encoding for those byte strings.
class ByteWriter {
 public:
  void u64(uint64_t v);
  void f64(double v);
  void bytes(std::span<const uint8_t> b);  // length-prefixed
  void str(std::string_view s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  std::vector<uint8_t>& data() { return data_; }

 private:
  std::vector<uint8_t> data_;
};

// Reads what ByteWriter wrote; Error (naming `what`) on a short or
// malformed buffer.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> data, const char* what) : data_(data), what_(what) {}
  uint64_t u64();
  double f64();
  std::span<const uint8_t> bytes();
  std::string str();
  bool done() const { return pos_ == data_.size(); }

 private:
  std::span<const uint8_t> take(size_t n);
  std::span<const uint8_t> data_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace cohort::data
