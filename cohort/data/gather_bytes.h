// Every rank's byte string, on every rank: how the analyzers and
// gather_cursor merge rank-local state that has no fixed size. The merge
// takes an AllgatherBytes, made over a communicator (whose calls must come
// from the calling thread alone, e.g. a communicator of the analysis' own)
// or over an engine (any thread; the engine runs the collective, as the
// torch layer's programs already hold one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/engine/engine.h"

namespace cohort::data {

// Collective: result[r] is rank r's `mine`, on every rank.
using AllgatherBytes = std::function<std::vector<std::vector<uint8_t>>(std::span<const uint8_t> mine)>;

// One allgather of the lengths, one allgatherv of the bytes.
AllgatherBytes allgather_over(comm::Communicator& comm);
// One named allgather op of the engine (rows of different lengths per rank).
AllgatherBytes allgather_over(engine::Engine& engine, std::string name);

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
