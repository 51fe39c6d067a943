#include "examples/fashion_mnist/dataset.h"

#include <sys/stat.h>

#include <cstring>

#include <torch/torch.h>

#include "cohort/common/check.h"
#include "cohort/data/idx_reader.h"

namespace cohort::examples {
namespace {

std::string find_file(const std::string& dir, const std::string& stem) {
  struct stat st;
  for (const std::string& name : {stem + ".gz", stem})
    if (::stat((dir + "/" + name).c_str(), &st) == 0) return dir + "/" + name;
  COHORT_THROW(ConfigError) << "Fashion-MNIST file " << stem << "(.gz) not found in " << dir
                            << " (install Debian's dataset-fashion-mnist, or pass --data-dir)";
  return {};
}

std::pair<at::Tensor, at::Tensor> load_split(const std::string& dir, const std::string& prefix, int64_t limit) {
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  data::IdxArray images = data::read_idx(images_path, 3);
  data::IdxArray labels = data::read_idx(labels_path, 1);
  COHORT_CHECK_AS(ConfigError, images.dims[1] == 28 && images.dims[2] == 28)
      << images_path << ": images are " << images.dims[1] << "x" << images.dims[2] << ", expected 28x28";
  COHORT_CHECK_AS(ConfigError, images.dims[0] == labels.dims[0])
      << images_path << " holds " << images.dims[0] << " images but " << labels_path << " holds " << labels.dims[0]
      << " labels";
  for (uint8_t l : labels.data)
    COHORT_CHECK_AS(ConfigError, l < 10) << labels_path << ": label " << int(l) << " is outside 0..9";
  int64_t n = images.dims[0];
  if (limit > 0) n = std::min(n, limit);
  at::Tensor x = at::empty({n, 28, 28}, at::kByte);
  std::memcpy(x.data_ptr<uint8_t>(), images.data.data(), size_t(n) * 28 * 28);
  at::Tensor y = at::empty({n}, at::kByte);
  std::memcpy(y.data_ptr<uint8_t>(), labels.data.data(), size_t(n));
  return {x, y.to(at::kLong)};
}

}  // namespace

FashionMnist load_fashion_mnist(const std::string& dir, int64_t limit_train, int64_t limit_test) {
  FashionMnist d;
  std::tie(d.train_images, d.train_labels) = load_split(dir, "train", limit_train);
  std::tie(d.test_images, d.test_labels) = load_split(dir, "t10k", limit_test);
  return d;
}

at::Tensor to_input(const at::Tensor& images_u8) {
  // Fashion-MNIST's training-set pixel mean and standard deviation (of /255).
  constexpr double kMean = 0.2860, kStd = 0.3530;
  return images_u8.to(at::kFloat).div_(255.0).sub_(kMean).div_(kStd).unsqueeze(1);
}

}  // namespace cohort::examples
