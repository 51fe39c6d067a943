#include "cohort/torch/fit/json_lines.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/torch/fit/output_directory.h"

namespace cohort {

namespace {

const std::string& with_parent_directories(const std::string& path) {
  create_parent_directories(path);
  return path;
}

}  // namespace

JsonLinesWriter::JsonLinesWriter(const std::string& path, bool append)
    : out_(with_parent_directories(path), append ? std::ios::app : std::ios::trunc) {
  COHORT_CHECK_AS(ConfigError, out_.is_open()) << "cannot open JSON-lines file " << path << ": " << std::strerror(errno);
}

void JsonLinesWriter::write(const JsonObject& object) {
  if (!out_.is_open()) return;
  out_ << object.str() << '\n';
  out_.flush();
}

}  // namespace cohort
