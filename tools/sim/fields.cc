#include "tools/sim/fields.h"

#include <cmath>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::sim {

void field_error(const json::Value& at, const std::string& path, const std::string& what) {
  COHORT_THROW(ConfigError) << at.where() << ": " << (path.empty() ? std::string("document") : path) << ": " << what;
}

std::string number_text(double v) {
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

Fields::Fields(const json::Value& object, std::string path) : object_(object), path_(std::move(path)) {
  if (!object_.is_object())
    field_error(object_, path_, std::string("expected an object, got ") + json::a_kind_name(object_.kind()));
}

std::string Fields::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const json::Value* Fields::optional(std::string_view key) {
  seen_.emplace(key);
  return object_.find(key);
}

const json::Value& Fields::required(std::string_view key) {
  const json::Value* v = optional(key);
  if (!v) field_error(object_, path_, "missing field '" + std::string(key) + "'");
  return *v;
}

double Fields::number(std::string_view key, std::optional<double> fallback, Range range) {
  const json::Value* v = fallback ? optional(key) : &required(key);
  if (!v) return *fallback;
  if (!v->is_number()) field_error(*v, path(key), std::string("expected a number, got ") + json::a_kind_name(v->kind()));
  const double x = v->number();
  if (!std::isfinite(x)) field_error(*v, path(key), "must be finite");
  if (range == Range::positive && !(x > 0)) field_error(*v, path(key), "must be positive, got " + number_text(x));
  if (range == Range::non_negative && x < 0)
    field_error(*v, path(key), "must not be negative, got " + number_text(x));
  return x;
}

int64_t Fields::integer(std::string_view key, std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
  const json::Value* v = fallback ? optional(key) : &required(key);
  if (!v) return *fallback;
  if (!v->is_number()) field_error(*v, path(key), std::string("expected an integer, got ") + json::a_kind_name(v->kind()));
  const double x = v->number();
  if (x != std::floor(x) || x < double(lo) || x > double(hi))
    field_error(*v, path(key),
                "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + number_text(x));
  return static_cast<int64_t>(x);
}

std::string Fields::text(std::string_view key, std::optional<std::string> fallback,
                         std::initializer_list<std::string_view> allowed) {
  const json::Value* v = fallback ? optional(key) : &required(key);
  if (!v) return *fallback;
  if (!v->is_string()) field_error(*v, path(key), std::string("expected a string, got ") + json::a_kind_name(v->kind()));
  if (allowed.size() > 0) {
    bool ok = false;
    std::string list;
    for (std::string_view a : allowed) {
      ok = ok || a == v->string();
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    if (!ok) field_error(*v, path(key), "'" + v->string() + "' is not one of: " + list);
  }
  return v->string();
}

bool Fields::flag(std::string_view key, bool fallback) {
  const json::Value* v = optional(key);
  if (!v) return fallback;
  if (!v->is_bool()) field_error(*v, path(key), std::string("expected true or false, got ") + json::a_kind_name(v->kind()));
  return v->boolean();
}

void Fields::finish() const {
  for (const auto& [k, v] : object_.members()) {
    if (seen_.contains(k)) continue;
    std::string known;
    for (const auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
    field_error(v, path(k), "unknown field (known here: " + known + ")");
  }
}

}  // namespace cohort::sim
