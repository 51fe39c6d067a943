#include "cohort/data/source.h"

namespace cohort::data {

MemorySource::MemorySource(std::vector<Sample> samples) : samples_(std::move(samples)) {
  for (size_t i = 0; i < samples_.size(); ++i) samples_[i].index = i;
}

Sample MemorySource::read(uint64_t index) const {
  COHORT_CHECK_LT(index, samples_.size()) << "sample index out of range";
  return samples_[index];
}

}  // namespace cohort::data
