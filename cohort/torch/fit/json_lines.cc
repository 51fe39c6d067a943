#include "cohort/torch/fit/json_lines.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/torch/fit/output_directory.h"

namespace cohort {

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += '"' + json::escape(k) + "\":";
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += '"' + json::escape(value) + '"';
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", value);
    body_ += buf;
  }
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

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
