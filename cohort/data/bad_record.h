// Bad records: data that cannot be read as what it claims to be (a frame
// whose CRC does not match, a truncated file, bytes that are not a
// tf.train.Example). Readers throw BadRecordError (or its kind
// CorruptRecordError, record_format.h); OnBadRecord says whether a reader or
// a pipeline stops there or counts the record and goes on.
#pragma once

#include <string>

#include "cohort/common/error.h"

namespace cohort::data {

class BadRecordError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

enum class OnBadRecord {
  fail,  // throw (the default: bad data is never silently lost)
  skip,  // count it (bad_records()) and go on
};

}  // namespace cohort::data
