// ShardRecord: one shard's state as bytes, the unit of replica snapshots
// (replica.h) and checkpoint files (checkpoint.h).
//
// A record is a fixed header, the variable's name, and then either the
// whole shard (values, then each optimizer slot) or, for a partial record,
// the changed rows' local indices followed by those rows of values and of
// each slot.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cohort/parameter_server/partition.h"

namespace cohort::ps {

struct ShardRecordHeader {
  uint32_t variable = 0;
  uint32_t index = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t variable_rows = 0;
  int64_t cols = 0;
  int64_t updates = 0;
  uint32_t dtype = 0;
  uint32_t sparse = 0;
  uint32_t slots = 0;
  uint32_t partial = 0;     // 1: only `rows` rows follow
  uint64_t rows = 0;        // partial: how many rows
  uint32_t name_bytes = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(ShardRecordHeader) == 80);

ShardRecordHeader record_header(const Shard& shard, bool partial, uint64_t rows);
VariableSpec record_spec(const ShardRecordHeader& header, std::string name);
ShardInfo record_info(const ShardRecordHeader& header, int partition);

// The bytes of rows `rows` (all rows when empty and `all`) of values and of
// each slot, back to back, written to `out` (record_data_bytes long).
size_t record_data_bytes(const Shard& shard, uint64_t rows);
void gather_rows(const Shard& shard, std::span<const int64_t> rows, std::byte* out);
void gather_all(const Shard& shard, std::byte* out);
// The reverse: writes those rows (or all) into the shard.
void scatter_rows(Shard& shard, std::span<const int64_t> rows, std::span<const std::byte> data);
void scatter_all(Shard& shard, std::span<const std::byte> data);

}  // namespace cohort::ps
