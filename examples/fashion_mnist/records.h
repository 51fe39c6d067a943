// Fashion-MNIST from TFRecord shards of tf.train.Example records
// {image: 784 raw bytes, label: int64}, as `cohort-data convert idx` writes
// them:
//
//   cohort-data convert idx --images train-images-idx3-ubyte.gz
//       --labels train-labels-idx1-ubyte.gz --out DIR --prefix train --shards 8
//   cohort-data convert idx --images t10k-images-idx3-ubyte.gz
//       --labels t10k-labels-idx1-ubyte.gz --out DIR --prefix test --shards 2
//
// The pixels' mean and standard deviation come from one distributed pass of
// the MeanVariance analyzer over the training records (each process reads
// its share; the states merge through the strategy), and go into the
// transform artifact that training applies and serving (serve.cc) loads.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>

#include "cohort/data/source.h"
#include "cohort/data/transform.h"
#include "cohort/torch/core/strategy.h"

namespace cohort::examples {

// DIR/train*.tfrecord (or DIR/test*.tfrecord), the first `limit` records
// when limit > 0. ConfigError when there are none.
std::shared_ptr<const data::Source> fashion_mnist_records(const std::string& dir, const std::string& split,
                                                          int64_t limit = 0);

// The per-sample transform, from raw records to the models' input:
// decode_raw(image) -> u8[28,28], z_score(image) with the analyzer's
// statistics -> f32, reshape(image) -> [1,28,28], reshape(label) -> [].
// Collective over `strategy` (the analyzer pass).
data::Transform analyze_fashion_mnist(const data::Source& train, Strategy& strategy);

// The transform's first kDecodeSteps steps decode (decode_raw, label
// reshape), the rest normalise (z_score, image reshape): training runs the
// augmentation between the two slices, on the u8 image, where zero padding
// is the images' black background.
inline constexpr size_t kDecodeSteps = 2;

// Random crop (4 pixels of padding) and horizontal flip of the decoded u8
// image, from the sample's own random numbers.
void augment_fashion_mnist(data::Sample& sample, data::SampleRng& rng);

// Every sample of `source` through `transform`, as one batch of tensors
// (input f32 [N,1,28,28], target int64 [N]), read by `workers` threads.
std::pair<at::Tensor, at::Tensor> transformed_tensors(std::shared_ptr<const data::Source> source,
                                                      const data::Transform& transform, int workers = 2);

}  // namespace cohort::examples
