#include "cohort/data/image_ops.h"

#include <algorithm>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/data/feature_values.h"

namespace cohort::data {
namespace {

struct Geometry {
  int64_t planes, height, width;
  size_t element;
};

Geometry geometry(const Feature& image) {
  COHORT_CHECK_AS(ConfigError, !image.is_bytes() && image.shape().size() >= 2)
      << "an image needs [..., H, W], got " << image.describe();
  const auto& s = image.shape();
  Geometry g{1, s[s.size() - 2], s[s.size() - 1], dtype_size(image.dtype())};
  for (size_t d = 0; d + 2 < s.size(); ++d) g.planes *= s[d];
  return g;
}

}  // namespace

Feature decode_u8_image(const Feature& raw, const std::vector<int64_t>& shape) {
  COHORT_CHECK_AS(ConfigError, raw.is_bytes() && raw.strings().size() == 1)
      << "an encoded image is one bytes value, got " << raw.describe();
  Feature image = Feature::zeros(DType::u8, shape);
  const std::string& bytes = raw.strings()[0];
  COHORT_CHECK_AS(ConfigError, bytes.size() == image.raw().size())
      << "image of " << bytes.size() << " bytes, the shape " << image.describe() << " needs " << image.raw().size();
  std::memcpy(image.raw().data(), bytes.data(), bytes.size());
  return image;
}

void random_crop(Feature& image, int64_t pad, SampleRng& rng) {
  COHORT_CHECK_AS(ConfigError, pad >= 0) << "negative crop padding";
  const Geometry g = geometry(image);
  // The crop window's top-left in padded coordinates, shifted to the
  // image's: source row r + dy, column c + dx (outside the image: zero).
  const int64_t dy = rng.between(0, 2 * pad) - pad;
  const int64_t dx = rng.between(0, 2 * pad) - pad;
  if (dy == 0 && dx == 0) return;
  std::vector<std::byte> out(image.raw().size());  // zeros
  const std::byte* in = image.raw().data();
  const int64_t c0 = std::max<int64_t>(0, -dx), c1 = std::min(g.width, g.width - dx);
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t r = 0; r < g.height; ++r) {
      const int64_t sr = r + dy;
      if (sr < 0 || sr >= g.height || c0 >= c1) continue;
      const size_t plane = size_t(p * g.height * g.width);
      std::memcpy(out.data() + (plane + size_t(r * g.width + c0)) * g.element,
                  in + (plane + size_t(sr * g.width + c0 + dx)) * g.element, size_t(c1 - c0) * g.element);
    }
  std::memcpy(image.raw().data(), out.data(), out.size());
}

void random_flip_horizontal(Feature& image, SampleRng& rng, double p) {
  const Geometry g = geometry(image);
  if (!rng.bernoulli(p)) return;
  std::byte* data = image.raw().data();
  for (int64_t row = 0; row < g.planes * g.height; ++row) {
    std::byte* line = data + size_t(row * g.width) * g.element;
    for (int64_t a = 0, b = g.width - 1; a < b; ++a, --b)
      std::swap_ranges(line + size_t(a) * g.element, line + size_t(a + 1) * g.element, line + size_t(b) * g.element);
  }
}

Feature to_normalized_f32(const Feature& image, double scale, double mean, double stddev) {
  COHORT_CHECK_AS(ConfigError, stddev > 0) << "normalising by a standard deviation of " << stddev;
  Feature out = Feature::zeros(DType::f32, image.shape());
  float* o = out.values<float>().data();
  const double a = scale / stddev, b = -mean / stddev;
  if (image.dtype() == DType::u8) {  // the common case, without the generic dispatch
    for (uint8_t x : image.values<uint8_t>()) *o++ = float(x * a + b);
    return out;
  }
  for_each_value(image, 1, [&](double x, size_t) { *o++ = float(x * a + b); });
  return out;
}

}  // namespace cohort::data
