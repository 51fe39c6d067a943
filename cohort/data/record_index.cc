#include "cohort/data/record_index.h"

#include <sys/stat.h>

#include <charconv>
#include <string_view>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"
#include "cohort/data/record_format.h"
#include "cohort/data/record_reader.h"

namespace cohort::data {

RecordIndex::RecordIndex(std::vector<uint64_t> starts) : starts_(std::move(starts)) {
  COHORT_CHECK(!starts_.empty() && starts_.front() == 0) << "a record index starts at byte 0";
}

RecordIndex build_index(std::shared_ptr<const RandomAccessFile> file) {
  // A full read: every CRC is checked, so an index is only ever built over
  // a file that reads back whole.
  RecordReader reader(std::move(file));
  RecordIndex index;
  while (const auto record = reader.next()) index.append(record->size() + kRecordOverheadBytes);
  return index;
}

RecordIndex load_index(const std::string& index_file, const std::string& record_file, uint64_t file_size) {
  const std::vector<uint8_t> bytes = read_whole_file(index_file);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<uint64_t> starts{0};
  size_t line_number = 0;
  size_t pos = 0;
  auto fail = [&](const std::string& what) {
    COHORT_THROW(ConfigError) << index_file << ": line " << line_number << ": " << what << " (rebuild it with "
                              << "`cohort-data index " << record_file << "`)";
  };
  while (pos < text.size()) {
    ++line_number;
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    uint64_t offset = 0, size = 0;
    const char* p = line.data();
    const char* e = line.data() + line.size();
    auto [after_offset, ec1] = std::from_chars(p, e, offset);
    if (ec1 != std::errc() || after_offset == e || *after_offset != ' ') fail("expected \"<offset> <size>\"");
    auto [after_size, ec2] = std::from_chars(after_offset + 1, e, size);
    if (ec2 != std::errc() || after_size != e) fail("expected \"<offset> <size>\"");
    if (offset != starts.back())
      fail("record starts at " + std::to_string(offset) + ", expected " + std::to_string(starts.back()) +
           " (the end of the previous record)");
    if (size < kRecordOverheadBytes || size > file_size - offset)
      fail("record of " + std::to_string(size) + " bytes at " + std::to_string(offset) + " does not fit the " +
           std::to_string(file_size) + "-byte file " + record_file);
    starts.push_back(offset + size);
  }
  COHORT_CHECK_AS(ConfigError, starts.back() == file_size)
      << index_file << " covers " << starts.back() << " bytes but " << record_file << " has " << file_size
      << " (rebuild it with `cohort-data index " << record_file << "`)";
  return RecordIndex(std::move(starts));
}

void write_index(const std::string& index_file, const RecordIndex& index) {
  // Synced like the records it indexes (record_writer.h says why).
  AtomicFile writer(index_file, {.durability = Durability::fsync_file_and_dir});
  // Two u64 of at most 20 digits each, a space and a newline.
  char line[64];
  for (uint64_t r = 0; r < index.records(); ++r) {
    char* p = std::to_chars(line, line + 20, index.offset(r)).ptr;
    *p++ = ' ';
    p = std::to_chars(p, p + 20, index.frame_size(r)).ptr;
    *p++ = '\n';
    writer.write(line, size_t(p - line));
  }
  writer.commit();
}

RecordIndex index_of(std::shared_ptr<const RandomAccessFile> file) {
  const std::string sidecar = index_path(file->name());
  struct stat st;
  if (::stat(sidecar.c_str(), &st) == 0) return load_index(sidecar, file->name(), file->size());
  return build_index(std::move(file));
}

}  // namespace cohort::data
