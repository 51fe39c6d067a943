#include "cohort/data/batch.h"

#include <cstring>

namespace cohort::data {
namespace {

std::string name_of(const Sample& s, const Source* source) {
  return source ? source->describe(s.index) : "sample " + std::to_string(s.index);
}

}  // namespace

Features collate(const std::vector<Sample>& samples, const Source* source) {
  Features columns;
  if (samples.empty()) return columns;
  const Sample& first = samples.front();
  for (const auto& [name, proto] : first.features) {
    const int64_t n = int64_t(samples.size());
    if (proto.is_bytes()) {
      std::vector<std::string> all;
      for (const Sample& s : samples) {
        const Feature* f = s.features.find(name);
        COHORT_CHECK_AS(ConfigError, f && f->is_bytes())
            << "cannot batch feature \"" << name << "\": " << name_of(first, source) << " has " << proto.describe()
            << ", " << name_of(s, source) << " has " << (f ? f->describe() : "none");
        all.insert(all.end(), f->strings().begin(), f->strings().end());
      }
      columns.set(name, Feature::bytes(std::move(all)));
      continue;
    }
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), proto.shape().begin(), proto.shape().end());
    Feature column = Feature::zeros(proto.dtype(), std::move(shape));
    std::byte* out = column.raw().data();
    const size_t bytes = proto.raw().size();
    for (const Sample& s : samples) {
      const Feature* f = s.features.find(name);
      COHORT_CHECK_AS(ConfigError, f && !f->is_bytes() && f->dtype() == proto.dtype() && f->shape() == proto.shape())
          << "cannot batch feature \"" << name << "\": " << name_of(first, source) << " has " << proto.describe()
          << ", " << name_of(s, source) << " has " << (f ? f->describe() : "none");
      std::memcpy(out, f->raw().data(), bytes);
      out += bytes;
    }
    columns.set(name, std::move(column));
  }
  for (const Sample& s : samples)
    COHORT_CHECK_AS(ConfigError, s.features.size() == first.features.size())
        << "cannot batch: " << name_of(s, source) << " has features {" << s.features.names() << "}, "
        << name_of(first, source) << " has {" << first.features.names() << "}";
  return columns;
}

}  // namespace cohort::data
