#include "cohort/parameter_server/shard_record.h"

#include <cstring>

#include "cohort/common/check.h"

namespace cohort::ps {

ShardRecordHeader record_header(const Shard& s, bool partial, uint64_t rows) {
  ShardRecordHeader h;
  h.variable = s.info.variable;
  h.index = s.info.index;
  h.row_begin = s.info.row_begin;
  h.row_end = s.info.row_end;
  h.variable_rows = s.spec.rows;
  h.cols = s.spec.cols;
  h.updates = s.updates;
  h.dtype = static_cast<uint32_t>(s.spec.dtype);
  h.sparse = s.spec.sparse;
  h.slots = static_cast<uint32_t>(s.slots.size());
  h.partial = partial;
  h.rows = rows;
  h.name_bytes = static_cast<uint32_t>(s.spec.name.size());
  return h;
}

VariableSpec record_spec(const ShardRecordHeader& h, std::string name) {
  COHORT_CHECK_AS(ConfigError, h.dtype == static_cast<uint32_t>(DType::f32) || h.dtype == static_cast<uint32_t>(DType::f64))
      << "shard record of '" << name << "' has element type code " << h.dtype << " (expected f32 or f64)";
  return {.name = std::move(name), .rows = h.variable_rows, .cols = h.cols, .dtype = static_cast<DType>(h.dtype),
          .sparse = h.sparse != 0};
}

ShardInfo record_info(const ShardRecordHeader& h, int partition) {
  return {.variable = h.variable, .index = h.index, .row_begin = h.row_begin, .row_end = h.row_end,
          .partition = partition};
}

size_t record_data_bytes(const Shard& s, uint64_t rows) {
  return static_cast<size_t>(rows) * static_cast<size_t>(s.row_bytes()) * (1 + s.slots.size());
}

void gather_rows(const Shard& s, std::span<const int64_t> rows, std::byte* at) {
  const size_t rb = static_cast<size_t>(s.row_bytes());
  auto copy = [&](const Bytes& src) {
    for (int64_t r : rows) {
      std::memcpy(at, src.data() + r * rb, rb);
      at += rb;
    }
  };
  copy(s.values);
  for (const Bytes& slot : s.slots) copy(slot);
}

void gather_all(const Shard& s, std::byte* at) {
  std::memcpy(at, s.values.data(), s.values.size());
  at += s.values.size();
  for (const Bytes& slot : s.slots) {
    std::memcpy(at, slot.data(), slot.size());
    at += slot.size();
  }
}

void scatter_all(Shard& s, std::span<const std::byte> data) {
  COHORT_CHECK_EQ(data.size(), s.values.size() * (1 + s.slots.size())) << "state of '" << s.spec.name << "' shard";
  const std::byte* at = data.data();
  std::memcpy(s.values.data(), at, s.values.size());
  at += s.values.size();
  for (Bytes& slot : s.slots) {
    std::memcpy(slot.data(), at, slot.size());
    at += slot.size();
  }
}

void scatter_rows(Shard& s, std::span<const int64_t> rows, std::span<const std::byte> data) {
  const size_t rb = static_cast<size_t>(s.row_bytes());
  COHORT_CHECK_EQ(data.size(), rows.size() * rb * (1 + s.slots.size())) << "rows of '" << s.spec.name << "'";
  const std::byte* at = data.data();
  auto copy = [&](Bytes& dst) {
    for (int64_t r : rows) {
      COHORT_CHECK(r >= 0 && r < s.info.rows()) << "row " << r << " outside '" << s.spec.name << "' shard";
      std::memcpy(dst.data() + r * rb, at, rb);
      at += rb;
    }
  };
  copy(s.values);
  for (Bytes& slot : s.slots) copy(slot);
}

}  // namespace cohort::ps
