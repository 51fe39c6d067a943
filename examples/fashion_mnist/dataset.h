// Fashion-MNIST as tensors, from the four IDX files of Debian's
// dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*.gz).
//
// Images stay uint8 ([N, 28, 28]) until a batch is taken: to_input()
// converts only that batch, which keeps each rank's copy at 55 MB.
#pragma once

#include <ATen/Tensor.h>

#include <array>
#include <cstdint>
#include <string>

namespace cohort::examples {

struct FashionMnist {
  at::Tensor train_images, train_labels;  // uint8 [N, 28, 28], int64 [N]
  at::Tensor test_images, test_labels;
};

inline constexpr std::array<const char*, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or without
// .gz). ConfigError for a missing or malformed file, images that are not
// 28x28, label and image counts that differ, or a label outside 0..9.
// `limit_train`/`limit_test` > 0 keep only the first examples.
FashionMnist load_fashion_mnist(const std::string& dir, int64_t limit_train = 0, int64_t limit_test = 0);

// A batch of images as the models' input: float32 [B, 1, 28, 28],
// normalised with the training set's mean and standard deviation.
at::Tensor to_input(const at::Tensor& images_u8);

}  // namespace cohort::examples
