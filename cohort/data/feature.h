// Feature and Sample: the element type of the data layer.
//
// A Feature is either a dense array (a DType, a shape, the elements in
// row-major order in native byte order) or a list of byte strings; that
// covers tf.train.Example's three list kinds (bytes, float, int64) and what
// decoding produces (uint8 pixels, float32 images, int64 token ids). A
// Sample is a few named features plus the sample's index in its source,
// which keys the sample's random numbers (philox.h).
//
// The torch layer turns a dense feature into a tensor without a copy (the
// storage is contiguous, aligned for every DType, and owned by the feature
// or the batch that holds it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/common/buffer_view.h"
#include "cohort/common/check.h"
#include "cohort/common/dtype.h"

namespace cohort::data {

class Feature {
 public:
  // An empty dense array of uint8, shape [0].
  Feature() : shape_{0} {}

  // A dense array of `dtype` and `shape`, zero-filled.
  static Feature zeros(DType dtype, std::vector<int64_t> shape);
  // A dense array holding `values`, of shape `shape` ([values.size()] when
  // empty; product(shape) must equal values.size()).
  template <typename T>
  static Feature of(std::span<const T> values, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {int64_t(values.size())};
    Feature f = zeros(dtype_of<T>(), std::move(shape));
    COHORT_CHECK_EQ(size_t(f.numel()), values.size()) << "values do not fill the shape";
    std::copy(values.begin(), values.end(), f.values<T>().begin());
    return f;
  }
  template <typename T>
  static Feature of(const std::vector<T>& values, std::vector<int64_t> shape = {}) {
    return of(std::span<const T>(values), std::move(shape));
  }
  // A 0-dimensional array (shape []); batches of scalars have shape [B].
  template <typename T>
  static Feature scalar(T value) {
    Feature f = zeros(dtype_of<T>(), {});
    f.values<T>()[0] = value;
    return f;
  }
  static Feature bytes(std::vector<std::string> values);

  bool is_bytes() const { return is_bytes_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  // Bytes of the elements (dense) or of all strings (bytes lists).
  size_t nbytes() const;

  // The elements as T; Error when the feature is not a dense T array.
  template <typename T>
  std::span<T> values() {
    check_dtype(dtype_of<T>());
    return {reinterpret_cast<T*>(storage_.data()), storage_.size() / sizeof(T)};
  }
  template <typename T>
  std::span<const T> values() const {
    check_dtype(dtype_of<T>());
    return {reinterpret_cast<const T*>(storage_.data()), storage_.size() / sizeof(T)};
  }
  std::span<std::byte> raw() { return storage_; }
  std::span<const std::byte> raw() const { return storage_; }
  BufferView view() { return {storage_.data(), size_t(numel()), dtype_}; }

  // The strings of a bytes list; Error for a dense feature.
  std::vector<std::string>& strings();
  const std::vector<std::string>& strings() const;

  // Same elements, another shape of the same element count.
  void reshape(std::vector<int64_t> shape);

  // "f32[1,28,28]" or "bytes[3]".
  std::string describe() const;

  bool operator==(const Feature& other) const;

 private:
  void check_dtype(DType want) const;

  bool is_bytes_ = false;
  DType dtype_ = DType::u8;
  std::vector<int64_t> shape_;
  std::vector<std::byte> storage_;
  std::vector<std::string> strings_;
};

// Named features in insertion order. Lookups compare names linearly: a
// sample has a handful of features.
class Features {
 public:
  using Entry = std::pair<std::string, Feature>;

  // Sets (adds or replaces) `name`.
  Feature& set(std::string name, Feature feature);
  // ConfigError naming the feature and the ones present when it is missing.
  Feature& at(std::string_view name);
  const Feature& at(std::string_view name) const;
  Feature* find(std::string_view name);
  const Feature* find(std::string_view name) const;
  bool erase(std::string_view name);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  size_t nbytes() const;
  std::string names() const;  // "image, label"

  bool operator==(const Features&) const = default;

 private:
  std::vector<Entry> entries_;
};

struct Sample {
  uint64_t index = 0;  // in the source; keys the sample's random numbers
  Features features;

  Feature& operator[](std::string_view name) { return features.at(name); }
  const Feature& operator[](std::string_view name) const { return features.at(name); }
};

}  // namespace cohort::data
