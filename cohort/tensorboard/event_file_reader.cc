#include "cohort/tensorboard/event_file_reader.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "cohort/common/check.h"
#include "cohort/data/record_format.h"
#include "cohort/tensorboard/event.pb.h"

namespace cohort::tfevents {
namespace {

constexpr int kDtFloat = 1, kDtDouble = 2;  // tensorflow.DataType

// The value of a 0-d float tensor, or false for any other tensor.
bool tensor_scalar(const proto::TensorProto& t, double& out) {
  if (t.dtype() == kDtFloat) {
    float f;
    if (t.float_val_size() == 1) {
      out = t.float_val(0);
    } else if (t.tensor_content().size() == sizeof f) {
      std::memcpy(&f, t.tensor_content().data(), sizeof f);  // little-endian, as every host cohort runs on
      out = f;
    } else {
      return false;
    }
    return true;
  }
  if (t.dtype() == kDtDouble) {
    if (t.double_val_size() == 1) {
      out = t.double_val(0);
    } else if (t.tensor_content().size() == sizeof(double)) {
      std::memcpy(&out, t.tensor_content().data(), sizeof(double));
    } else {
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace

EventFile read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COHORT_CHECK_AS(ConfigError, in.good()) << "cannot open the event file " << path;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint64_t size = bytes.size();

  EventFile file;
  proto::Event event;
  uint64_t offset = 0;
  while (offset < size) {
    if (size - offset < data::kRecordHeaderBytes) break;  // a partial header
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t(base[offset + uint64_t(i)]) << (8 * i);
    const uint64_t room = size - offset - data::kRecordHeaderBytes;
    const bool whole = length <= room && room - length >= data::kRecordFooterBytes;
    // The length's CRC first (against a frame size that fits): a length
    // that a CRC vouches for but the file does not hold is a tail cut short;
    // one that no CRC vouches for is damage.
    const uint64_t claimed_end = length > UINT64_MAX - offset - data::kRecordOverheadBytes
                                     ? UINT64_MAX
                                     : offset + data::kRecordOverheadBytes + length;
    data::decode_record_header(base + offset, path, offset, whole ? size : claimed_end);
    if (!whole) break;
    const std::span<const uint8_t> record(base + offset + data::kRecordHeaderBytes, length);
    data::check_record_data(record, base + offset + data::kRecordHeaderBytes + length, path, offset);
    if (length > uint64_t(INT32_MAX) || !event.ParseFromArray(record.data(), int(length)))
      throw data::CorruptRecordError(path, offset, "the record is not a tensorflow.Event");
    if (file.records == 0) {
      file.file_version = event.file_version();
      file.start_wall_time = event.wall_time();
    }
    if (event.has_summary()) {
      for (const auto& v : event.summary().value()) {
        double value;
        if (v.has_simple_value()) {
          value = v.simple_value();
        } else if (!v.has_tensor() || !tensor_scalar(v.tensor(), value)) {
          continue;
        }
        file.scalars.push_back({.tag = v.tag(), .step = event.step(), .value = value, .wall_time = event.wall_time()});
      }
    }
    ++file.records;
    offset += data::kRecordOverheadBytes + length;
    file.valid_bytes = offset;
  }
  file.truncated_tail = file.valid_bytes < size;
  return file;
}

}  // namespace cohort::tfevents
