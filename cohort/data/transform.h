// Transform: the per-sample preprocessing that a full pass of analyzers
// parameterised (tf.Transform's transform_fn), as one artifact that a
// training job saves and a serving program loads, so both apply the same
// steps with the same constants through the same code.
//
//   MeanVariance pixels;  ... one distributed pass, merge_across() ...
//   Transform t;
//   t.decode_raw("image", "image", DType::u8, {28, 28})
//    .z_score("image", "image", pixels)
//    .reshape("image", {1, 28, 28});
//   t.save(path);                       // training: pipeline.map(t.as_map())
//   Transform::load(path).apply(sample);  // serving
//
// Steps run in order; each reads its input feature and sets its output
// (the same name replaces it). A step whose input is missing or of the
// wrong kind is a ConfigError naming the step. The artifact is a protobuf
// message (transform.proto) written atomically.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/data/feature.h"
#include "cohort/data/mean_variance.h"
#include "cohort/data/min_max.h"
#include "cohort/data/pipeline.h"

namespace cohort::data {

class Transform {
 public:
  Transform();
  ~Transform();
  Transform(const Transform&);
  Transform& operator=(const Transform&);
  Transform(Transform&&) noexcept;
  Transform& operator=(Transform&&) noexcept;

  // A bytes feature holding one string of raw elements -> dtype[shape].
  Transform& decode_raw(std::string input, std::string output, DType dtype, std::vector<int64_t> shape);
  // Standardise with the analyzer's means and standard deviations (one per
  // column; one column applies to every element) -> f32.
  Transform& z_score(std::string input, std::string output, const MeanVariance& stats);
  // Scale into [0, 1] with the analyzer's range -> f32.
  Transform& scale_min_max(std::string input, std::string output, const MinMax& range);
  // Bucket index of each element (first boundary > x) -> i64.
  Transform& bucketize(std::string input, std::string output, std::vector<double> boundaries);
  // Id of each string of a bytes feature in `tokens` (oov_id otherwise, by
  // default tokens.size()) -> i64.
  Transform& vocabulary(std::string input, std::string output, std::vector<std::string> tokens, int64_t oov_id = -1);
  Transform& reshape(std::string feature, std::vector<int64_t> shape);

  void apply(Sample& sample) const;
  // apply() as a pipeline map (draws no random numbers).
  MapFn as_map() const;

  void save(const std::string& path) const;
  // ConfigError naming the path when it is missing or not a transform.
  static Transform load(const std::string& path);

  size_t steps() const;
  // Steps [begin, end) as a transform of their own, with the same constants
  // (a training job runs augmentation between two slices of the artifact
  // that serving applies whole). ConfigError for a range outside steps().
  Transform slice(size_t begin, size_t end) const;
  // One line per step: "z_score image -> image (1 column)".
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::data
