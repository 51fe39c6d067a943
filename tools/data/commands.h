// cohort-data's subcommands (main.cc parses the command line and calls
// them). Each returns the process exit status: 0 success, 1 bad data (a
// corrupt record, an unreadable input); bad flags are ConfigError, exit 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::tools::data {

struct ConvertOptions {
  std::string kind;                 // "idx" or "text"
  std::string images, labels;       // idx: the two IDX files
  std::vector<std::string> inputs;  // text: the text files
  std::string out_dir;
  std::string prefix = "data";
  int shards = 1;
  bool skip_empty_lines = false;
};

// Writes out_dir/<prefix>-SSSSS-of-NNNNN.tfrecord (+ .index) as
// tf.train.Example records and prints one line per shard.
int convert(const ConvertOptions& options);

// Counts the records of every file, checking every CRC (and, with
// `examples`, that each record parses as a tf.train.Example).
int inspect(const std::vector<std::string>& paths, bool examples);

// Writes the sidecar index of every file.
int index(const std::vector<std::string>& paths);

// The files the arguments name: files as given, directories expanded to
// their TFRecord files (record_source.h's list_record_files).
std::vector<std::string> expand_record_paths(const std::vector<std::string>& paths);

}  // namespace cohort::tools::data
