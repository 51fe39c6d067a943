// JsonObject: a flat JSON object built field by field, for cohort's JSON
// lines and telemetry records (json.h reads them back):
//
//   JsonObject().add("event", "epoch").add("accuracy", 0.87).str()  // {"event":"epoch","accuracy":0.87}
//
// Strings are escaped; non-finite numbers become null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  // `significant_digits`: 6 keeps metric lines short; 17 round-trips a double.
  JsonObject& add(std::string_view key, double value, int significant_digits = 6);
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, int64_t(value)); }
  JsonObject& add(std::string_view key, bool value);
  // `json` is already JSON text (a nested object or array); added as is.
  JsonObject& add_raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

// `value` as JSON text with `significant_digits` (17 round-trips a double);
// null when not finite. What JsonObject::add writes for a double.
std::string json_number(double value, int significant_digits = 6);

// `items`, each already JSON text, as a JSON array (add_raw takes it); one
// item per line when `lines`, for arrays of records people read.
std::string json_array(const std::vector<std::string>& items, bool lines = false);

}  // namespace cohort
