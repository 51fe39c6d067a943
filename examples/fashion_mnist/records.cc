#include "examples/fashion_mnist/records.h"

#include <torch/torch.h>

#include <filesystem>

#include "cohort/common/check.h"
#include "cohort/data/image_ops.h"
#include "cohort/data/mean_variance.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/record_source.h"
#include "cohort/torch/data/pipeline_input.h"

namespace cohort::examples {

std::shared_ptr<const data::Source> fashion_mnist_records(const std::string& dir, const std::string& split,
                                                          int64_t limit) {
  std::vector<std::string> files;
  for (const std::string& f : data::list_record_files(dir))
    if (std::filesystem::path(f).filename().string().starts_with(split)) files.push_back(f);
  COHORT_CHECK_AS(ConfigError, !files.empty())
      << "no " << split << "*.tfrecord files in " << dir << " (make them with: cohort-data convert idx --prefix "
      << split << " ...)";
  std::shared_ptr<const data::Source> source = std::make_shared<data::RecordSource>(std::move(files));
  return limit > 0 ? data::first_samples(std::move(source), uint64_t(limit)) : source;
}

data::Transform analyze_fashion_mnist(const data::Source& train, Strategy& strategy) {
  // Every pixel of this process's share of the records (every P-th), then
  // one merge over the processes: the same statistics everywhere.
  data::MeanVariance pixels;
  const auto p = uint64_t(strategy.process_count());
  for (uint64_t i = uint64_t(strategy.process_index()); i < train.size(); i += p)
    pixels.add(data::decode_u8_image(train.read(i)["image"], {28, 28}));
  pixels.merge_across(allgather_over(strategy));
  data::Transform t;
  t.decode_raw("image", "image", DType::u8, {28, 28})
      .reshape("label", {})
      .z_score("image", "image", pixels)
      .reshape("image", {1, 28, 28});
  return t;
}

void augment_fashion_mnist(data::Sample& sample, data::SampleRng& rng) {
  data::Feature& image = sample["image"];
  data::random_crop(image, 4, rng);
  data::random_flip_horizontal(image, rng);
}

std::pair<at::Tensor, at::Tensor> transformed_tensors(std::shared_ptr<const data::Source> source,
                                                      const data::Transform& transform, int workers) {
  // One batch of every sample, in order.
  data::Pipeline p(source, {.order = {.shuffle = false},
                            .batch_size = int64_t(source->size()),
                            .workers = workers,
                            .prefetch = 1});
  p.map(transform.as_map());
  p.start(0);
  const Batch b = to_batch(p.next(), "image", "label");
  return {b.input.clone(), b.target.clone()};
}

}  // namespace cohort::examples
