#include "cohort/data/record_writer.h"

#include "cohort/data/record_format.h"

namespace cohort::data {

RecordWriter::RecordWriter(std::string path, RecordWriterOptions options)
    : options_(options),
      // Records are small and many: gather them into 1 MiB writes.
      file_(std::move(path), {.durability = Durability::fsync_file_and_dir, .buffer_bytes = size_t(1) << 20}) {}

void RecordWriter::write(std::span<const uint8_t> data) {
  uint8_t header[kRecordHeaderBytes];
  uint8_t footer[kRecordFooterBytes];
  encode_record_header(data.size(), header);
  encode_record_footer(data, footer);
  file_.write(header, sizeof header);
  file_.write(data.data(), data.size());
  file_.write(footer, sizeof footer);
  index_.append(data.size() + kRecordOverheadBytes);
}

void RecordWriter::close() {
  file_.commit();
  if (options_.write_index) write_index(index_path(file_.path()), index_);
}

}  // namespace cohort::data
