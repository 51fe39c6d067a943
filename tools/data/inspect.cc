// cohort-data inspect and index: read TFRecord files through, every CRC
// checked. inspect prints per file its records, bytes and, with
// --examples, the features of its first record; a bad file prints the
// error (file and byte offset of the first bad record) and makes the exit
// status 1, after the other files have been checked. index writes each
// file's sidecar index.
#include <cinttypes>
#include <cstdio>
#include <map>

#include "cohort/common/check.h"
#include "cohort/data/example.h"
#include "cohort/data/record_index.h"
#include "cohort/data/record_reader.h"
#include "cohort/data/record_source.h"
#include "tools/data/commands.h"

namespace cohort::tools::data {

using namespace cohort::data;

std::vector<std::string> expand_record_paths(const std::vector<std::string>& paths) {
  COHORT_CHECK_AS(ConfigError, !paths.empty()) << "no files given";
  std::vector<std::string> files;
  for (const std::string& p : paths)
    for (std::string& f : list_record_files(p)) files.push_back(std::move(f));
  return files;
}

int inspect(const std::vector<std::string>& paths, bool examples) {
  uint64_t total = 0, bad_files = 0;
  for (const std::string& path : expand_record_paths(paths)) {
    try {
      RecordReader reader(path);
      uint64_t records = 0;
      std::string first_features;
      while (const auto record = reader.next()) {
        if (examples) {
          Features f;
          std::string error;
          if (!parse_example(*record, f, &error))
            throw BadRecordError(path + ": record " + std::to_string(records) + " at byte offset " +
                                 std::to_string(reader.record_offset()) + ": " + error);
          if (records == 0)
            for (const auto& [name, feature] : f)
              first_features += (first_features.empty() ? "" : ", ") + name + " " + feature.describe();
        }
        ++records;
      }
      total += records;
      std::printf("%s: %" PRIu64 " records, %" PRIu64 " bytes, all CRCs good%s%s\n", path.c_str(), records,
                  reader.file().size(), first_features.empty() ? "" : "; features: ", first_features.c_str());
    } catch (const BadRecordError& e) {
      ++bad_files;
      std::fprintf(stderr, "cohort-data: %s\n", e.what());
    }
  }
  std::printf("total: %" PRIu64 " records%s\n", total, bad_files ? "" : ", no errors");
  if (bad_files) std::fprintf(stderr, "cohort-data: %" PRIu64 " bad file(s)\n", bad_files);
  return bad_files ? 1 : 0;
}

int index(const std::vector<std::string>& paths) {
  int status = 0;
  for (const std::string& path : expand_record_paths(paths)) {
    try {
      const RecordIndex idx = build_index(open_file(path));
      write_index(index_path(path), idx);
      std::printf("%s: %" PRIu64 " records indexed in %s\n", path.c_str(), idx.records(), index_path(path).c_str());
    } catch (const BadRecordError& e) {
      status = 1;
      std::fprintf(stderr, "cohort-data: %s (no index written)\n", e.what());
    }
  }
  return status;
}

}  // namespace cohort::tools::data
