#include "cohort/common/json_object.h"

#include <cmath>
#include <cstdio>

#include "cohort/common/json.h"

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

std::string json_number(double value, int significant_digits) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", significant_digits, value);
  return buf;
}

std::string json_array(const std::vector<std::string>& items, bool lines) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? (lines ? ",\n" : ", ") : (lines ? "\n" : "")) + items[i];
  return out + (lines && !items.empty() ? "\n]" : "]");
}

JsonObject& JsonObject::add(std::string_view k, double value, int significant_digits) {
  key(k);
  body_ += json_number(value, significant_digits);
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

JsonObject& JsonObject::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace cohort
