#include "cohort/data/idx_source.h"

#include <cstring>

#include "cohort/common/check.h"

namespace cohort::data {

IdxSource::IdxSource(const std::string& images_path, const std::string& labels_path)
    : IdxSource(read_idx(images_path, 3), read_idx(labels_path, 1), images_path) {}

IdxSource::IdxSource(IdxArray images, IdxArray labels, const std::string& name)
    : name_(name), images_(std::move(images)), labels_(std::move(labels)) {
  COHORT_CHECK_AS(ConfigError, !images_.dims.empty() && labels_.dims.size() == 1)
      << name_ << ": expected images [N, ...] and labels [N]";
  COHORT_CHECK_AS(ConfigError, images_.dims[0] == labels_.dims[0])
      << name_ << " holds " << images_.dims[0] << " images but its labels number " << labels_.dims[0];
  for (size_t d = 1; d < images_.dims.size(); ++d) {
    image_shape_.push_back(images_.dims[d]);
    image_bytes_ *= images_.dims[d];
  }
}

Sample IdxSource::read(uint64_t index) const {
  COHORT_CHECK_LT(index, size()) << "sample index out of range";
  Sample s;
  s.index = index;
  Feature image = Feature::zeros(DType::u8, image_shape_);
  std::memcpy(image.raw().data(), images_.data.data() + index * image_bytes_, image_bytes_);
  s.features.set("image", std::move(image));
  s.features.set("label", Feature::scalar<int64_t>(labels_.data[index]));
  return s;
}

std::string IdxSource::describe(uint64_t index) const { return name_ + " image " + std::to_string(index); }

}  // namespace cohort::data
