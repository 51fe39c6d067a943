// IdxSource: an IDX array of images and one of labels (the MNIST family's
// layout) as samples: "image" u8 of the images' trailing dimensions
// ([28, 28] for Fashion-MNIST) and "label" i64 scalar.
#pragma once

#include <string>

#include "cohort/data/idx_reader.h"
#include "cohort/data/source.h"

namespace cohort::data {

class IdxSource final : public Source {
 public:
  // ConfigError when the files are malformed (idx_reader.h) or hold
  // different numbers of images and labels.
  IdxSource(const std::string& images_path, const std::string& labels_path);
  IdxSource(IdxArray images, IdxArray labels, const std::string& name = "<memory>");

  uint64_t size() const override { return labels_.data.size(); }
  Sample read(uint64_t index) const override;
  std::string describe(uint64_t index) const override;

  // The shape of one image (the images' dimensions after the first).
  const std::vector<int64_t>& image_shape() const { return image_shape_; }

 private:
  std::string name_;
  IdxArray images_, labels_;
  std::vector<int64_t> image_shape_;
  size_t image_bytes_ = 1;
};

}  // namespace cohort::data
