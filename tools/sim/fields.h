// Fields: typed reading of one JSON object's members, for the simulator's
// input files, with errors that name the field by its path
// ("links.network.alpha_s") and point at it (file:line:column).
//
//   Fields f(doc, "");                      // the top-level object
//   int hosts = f.integer("hosts", 1, 1, 1 << 20);
//   Fields net(f.required("network"), f.path("network"));
//   double a = net.number("alpha_s", 0.0, Range::non_negative);
//   f.finish();                              // unknown members are errors
//
// An unknown member is an error (finish()), so that a misspelt field does
// not silently take its default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "cohort/common/json.h"

namespace cohort::sim {

enum class Range { any, non_negative, positive };

class Fields {
 public:
  // ConfigError unless `object` is an object; `path` is its path ("" at the top).
  Fields(const json::Value& object, std::string path);

  // "path.key" (or "key" at the top level).
  std::string path(std::string_view key) const;

  const json::Value* optional(std::string_view key);
  const json::Value& required(std::string_view key);

  // A number in `range`; `fallback` when absent (required when nullopt).
  double number(std::string_view key, std::optional<double> fallback, Range range = Range::any);
  // An integer in [lo, hi].
  int64_t integer(std::string_view key, std::optional<int64_t> fallback, int64_t lo, int64_t hi);
  // A string, one of `allowed` when that is not empty.
  std::string text(std::string_view key, std::optional<std::string> fallback,
                   std::initializer_list<std::string_view> allowed = {});
  bool flag(std::string_view key, bool fallback);

  // ConfigError naming the first member no getter asked for.
  void finish() const;

  const json::Value& object() const { return object_; }

 private:
  const json::Value& object_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// ConfigError "<where>: <path>: <what>".
[[noreturn]] void field_error(const json::Value& at, const std::string& path, const std::string& what);

// A number's text as a user wrote it (no trailing zeros).
std::string number_text(double v);

}  // namespace cohort::sim
