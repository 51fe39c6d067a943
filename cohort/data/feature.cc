#include "cohort/data/feature.h"

#include <sstream>

namespace cohort::data {
namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    COHORT_CHECK_GE(d, 0) << "negative dimension";
    n *= d;
  }
  return n;
}

}  // namespace

Feature Feature::zeros(DType dtype, std::vector<int64_t> shape) {
  Feature f;
  f.dtype_ = dtype;
  f.shape_ = std::move(shape);
  f.storage_.resize(size_t(product(f.shape_)) * dtype_size(dtype));
  return f;
}

Feature Feature::bytes(std::vector<std::string> values) {
  Feature f;
  f.is_bytes_ = true;
  f.shape_ = {int64_t(values.size())};
  f.strings_ = std::move(values);
  return f;
}

int64_t Feature::numel() const { return is_bytes_ ? int64_t(strings_.size()) : product(shape_); }

size_t Feature::nbytes() const {
  if (!is_bytes_) return storage_.size();
  size_t n = 0;
  for (const auto& s : strings_) n += s.size();
  return n;
}

std::vector<std::string>& Feature::strings() {
  COHORT_CHECK(is_bytes_) << "feature " << describe() << " is not a bytes list";
  return strings_;
}

const std::vector<std::string>& Feature::strings() const {
  COHORT_CHECK(is_bytes_) << "feature " << describe() << " is not a bytes list";
  return strings_;
}

void Feature::reshape(std::vector<int64_t> shape) {
  COHORT_CHECK(!is_bytes_) << "a bytes list has no shape to change";
  COHORT_CHECK_EQ(product(shape), numel()) << "reshape of " << describe() << " changes the element count";
  shape_ = std::move(shape);
}

void Feature::check_dtype(DType want) const {
  COHORT_CHECK(!is_bytes_ && dtype_ == want)
      << "feature " << describe() << " read as " << dtype_name(want);
}

std::string Feature::describe() const {
  std::ostringstream os;
  os << (is_bytes_ ? std::string_view("bytes") : dtype_name(dtype_)) << '[';
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? "," : "") << shape_[i];
  os << ']';
  return os.str();
}

bool Feature::operator==(const Feature& other) const {
  return is_bytes_ == other.is_bytes_ && dtype_ == other.dtype_ && shape_ == other.shape_ &&
         storage_ == other.storage_ && strings_ == other.strings_;
}

Feature& Features::set(std::string name, Feature feature) {
  if (Feature* f = find(name)) return *f = std::move(feature);
  return entries_.emplace_back(std::move(name), std::move(feature)).second;
}

Feature* Features::find(std::string_view name) {
  for (auto& [n, f] : entries_)
    if (n == name) return &f;
  return nullptr;
}

const Feature* Features::find(std::string_view name) const {
  return const_cast<Features*>(this)->find(name);
}

Feature& Features::at(std::string_view name) {
  Feature* f = find(name);
  COHORT_CHECK_AS(ConfigError, f != nullptr)
      << "no feature \"" << name << "\" (the sample has: " << (empty() ? "none" : names()) << ")";
  return *f;
}

const Feature& Features::at(std::string_view name) const { return const_cast<Features*>(this)->at(name); }

bool Features::erase(std::string_view name) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->first == name) {
      entries_.erase(it);
      return true;
    }
  return false;
}

size_t Features::nbytes() const {
  size_t n = 0;
  for (const auto& [name, f] : entries_) n += f.nbytes();
  return n;
}

std::string Features::names() const {
  std::string out;
  for (const auto& [name, f] : entries_) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace cohort::data
