#include "cohort/torch/fit/json_lines.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort {

std::string json_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += '"' + json_escape(k) + "\":";
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += '"' + json_escape(value) + '"';
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

JsonLinesWriter::JsonLinesWriter(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
  COHORT_CHECK_AS(ConfigError, out_.is_open()) << "cannot open JSON-lines file " << path << ": " << std::strerror(errno);
}

void JsonLinesWriter::write(const JsonObject& object) {
  if (!out_.is_open()) return;
  out_ << object.str() << '\n';
  out_.flush();
}

}  // namespace cohort
