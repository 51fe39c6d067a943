#include "cohort/engine/wire.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort::engine {
namespace {

template <typename T>
void put(std::string& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    auto bytes = std::bit_cast<std::array<char, sizeof(T)>>(v);
    std::reverse(bytes.begin(), bytes.end());
    out.append(bytes.data(), bytes.size());
  } else {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out.append(bytes, sizeof(T));
  }
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
      auto b = std::bit_cast<std::array<char, sizeof(T)>>(v);
      std::reverse(b.begin(), b.end());
      v = std::bit_cast<T>(b);
    }
    at_ += sizeof(T);
    return v;
  }

  std::string string(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }

  bool done() const { return at_ == bytes_.size(); }

 private:
  void need(size_t n) const {
    COHORT_CHECK(n <= bytes_.size() - at_)
        << "malformed negotiation payload: " << n << " bytes needed at offset " << at_ << " of "
        << bytes_.size();
  }
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

}  // namespace

void append_entry(std::string& out, const std::string& name, const OpMeta& m) {
  COHORT_CHECK_LE(name.size(), kMaxNameBytes) << "op name too long";
  COHORT_CHECK_LE(m.shape.size(), kMaxShapeDims) << "shape of op '" << name << "' has too many dimensions";
  put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out.append(name);
  put<uint8_t>(out, static_cast<uint8_t>(m.kind));
  put<uint8_t>(out, static_cast<uint8_t>(m.dtype));
  put<uint8_t>(out, static_cast<uint8_t>(m.op));
  put<int32_t>(out, m.root);
  put<uint64_t>(out, m.count);
  put<uint64_t>(out, m.row_elements);
  put<double>(out, m.prescale);
  put<double>(out, m.postscale);
  put<uint32_t>(out, static_cast<uint32_t>(m.shape.size()));
  for (int64_t d : m.shape) put<int64_t>(out, d);
}

std::string finish_payload(const std::string& body, uint32_t entries) {
  std::string out;
  out.reserve(body.size() + 4);
  put<uint32_t>(out, entries);
  out.append(body);
  return out;
}

std::vector<PayloadEntry> parse_payload(std::span<const std::byte> bytes) {
  Reader r(bytes);
  const uint32_t n = r.get<uint32_t>();
  // Each entry takes at least 50 bytes: bound the reservation by the size.
  COHORT_CHECK_LE(size_t(n), bytes.size() / 50 + 1) << "malformed negotiation payload: entry count";
  std::vector<PayloadEntry> entries;
  entries.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    PayloadEntry e;
    const uint32_t len = r.get<uint32_t>();
    COHORT_CHECK_LE(size_t(len), kMaxNameBytes) << "malformed negotiation payload: name length";
    e.name = r.string(len);
    OpMeta& m = e.meta;
    const auto kind = r.get<uint8_t>();
    const auto dtype = r.get<uint8_t>();
    const auto op = r.get<uint8_t>();
    COHORT_CHECK(kind >= uint8_t(OpKind::allreduce) && kind <= uint8_t(OpKind::barrier))
        << "malformed negotiation payload: op kind " << int(kind);
    COHORT_CHECK(dtype <= uint8_t(DType::i64)) << "malformed negotiation payload: dtype " << int(dtype);
    COHORT_CHECK(op <= uint8_t(ReduceOp::product)) << "malformed negotiation payload: reduce op " << int(op);
    m.kind = static_cast<OpKind>(kind);
    m.dtype = static_cast<DType>(dtype);
    m.op = static_cast<ReduceOp>(op);
    m.root = r.get<int32_t>();
    m.count = r.get<uint64_t>();
    m.row_elements = r.get<uint64_t>();
    m.prescale = r.get<double>();
    m.postscale = r.get<double>();
    const uint32_t dims = r.get<uint32_t>();
    COHORT_CHECK_LE(size_t(dims), kMaxShapeDims) << "malformed negotiation payload: shape rank";
    m.shape.resize(dims);
    for (auto& d : m.shape) d = r.get<int64_t>();
    entries.push_back(std::move(e));
  }
  COHORT_CHECK(r.done()) << "malformed negotiation payload: trailing bytes";
  return entries;
}

}  // namespace cohort::engine
