// Checkpoints of sharded variables that reload with any number of servers.
//
// Each partition writes one file of shard records (shard_record.h: global
// row range, values and optimizer state) and answers with the entries it
// wrote; the chief then writes `manifest`, a text file listing every entry
// with its file, offset, size and CRC-32, which is the commit point (files
// and manifest are written to a temporary name, synced and renamed). A
// checkpoint is loaded by row ranges: a shard of any new layout reads the
// rows it covers from whichever entries hold them, so a checkpoint saved
// with 2 servers loads with 1 or 3 (TensorFlow requires the same number).
//
// A missing, truncated or corrupt checkpoint (CRC mismatch, rows not
// covered, a different shape or optimizer) is a ConfigError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/parameter_server/partition.h"

namespace cohort::ps {

struct CheckpointEntry {
  std::string variable;
  DType dtype = DType::f32;
  int64_t rows = 0;  // the variable's
  int64_t cols = 0;
  int64_t row_begin = 0, row_end = 0;
  int64_t updates = 0;
  int slots = 0;
  std::string file;  // relative to the checkpoint directory
  uint64_t offset = 0, bytes = 0;
  uint32_t crc = 0;

  std::string encode() const;  // one tab-separated line
  static CheckpointEntry decode(const std::string& line);
};

struct Manifest {
  int64_t step = 0;
  std::string rule;
  std::vector<CheckpointEntry> entries;
};

// Writes every shard of `partition` to `dir/file`; returns the entries.
std::vector<CheckpointEntry> save_partition(const Partition& partition, const std::string& dir,
                                            const std::string& file);

// Writes the manifest (atomically, last).
void write_manifest(const std::string& dir, const Manifest& manifest);
Manifest read_manifest(const std::string& dir);
bool has_manifest(const std::string& dir);

// Fills every shard of `partition` from the checkpoint and sets its version
// and every worker's clock to the checkpoint's step.
void load_partition(Partition& partition, const std::string& dir, const Manifest& manifest);

}  // namespace cohort::ps
