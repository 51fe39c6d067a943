#include "cohort/data/source.h"

#include <algorithm>

namespace cohort::data {

MemorySource::MemorySource(std::vector<Sample> samples) : samples_(std::move(samples)) {
  for (size_t i = 0; i < samples_.size(); ++i) samples_[i].index = i;
}

Sample MemorySource::read(uint64_t index) const {
  COHORT_CHECK_LT(index, samples_.size()) << "sample index out of range";
  return samples_[index];
}

namespace {

class FirstSamples final : public Source {
 public:
  FirstSamples(std::shared_ptr<const Source> inner, uint64_t n) : inner_(std::move(inner)), n_(n) {}
  uint64_t size() const override { return n_; }
  Sample read(uint64_t index) const override {
    COHORT_CHECK_LT(index, n_) << "sample index out of range";
    return inner_->read(index);
  }
  std::string describe(uint64_t index) const override { return inner_->describe(index); }
  std::vector<uint64_t> file_sizes() const override {
    std::vector<uint64_t> sizes;
    uint64_t left = n_;
    for (uint64_t s : inner_->file_sizes()) {
      if (left == 0) break;
      sizes.push_back(std::min(s, left));
      left -= sizes.back();
    }
    return sizes;
  }

 private:
  std::shared_ptr<const Source> inner_;
  uint64_t n_;
};

}  // namespace

std::shared_ptr<const Source> first_samples(std::shared_ptr<const Source> source, uint64_t n) {
  COHORT_CHECK_AS(ConfigError, source != nullptr) << "first_samples: the source is null";
  if (n >= source->size()) return source;
  return std::make_shared<FirstSamples>(std::move(source), n);
}

}  // namespace cohort::data
