// Image ops against a direct reference: the crop builds the zero-padded
// image and cuts the window the same random offsets select; the flip
// mirrors when the same draw says so; every offset in [0, 2*pad]^2 occurs.
#include <gtest/gtest.h>

#include <set>

#include "cohort/data/image_ops.h"

namespace cohort::data::image_ops_test {
namespace {

Feature test_image(DType dtype, std::vector<int64_t> shape) {
  Feature f = Feature::zeros(dtype, shape);
  if (dtype == DType::u8) {
    auto v = f.values<uint8_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 7 + 1);
  } else {
    auto v = f.values<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) + 0.5f;
  }
  return f;
}

template <typename T>
std::vector<T> reference_crop(const Feature& image, int64_t pad, int64_t oy, int64_t ox) {
  const auto& s = image.shape();
  const int64_t h = s[s.size() - 2], w = s[s.size() - 1], planes = image.numel() / (h * w);
  const auto in = image.values<T>();
  std::vector<T> out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t c = 0; c < w; ++c) {
        // Padded coordinates (r + oy, c + ox) -> image (r + oy - pad, c + ox - pad).
        const int64_t sr = r + oy - pad, sc = c + ox - pad;
        out.push_back(sr < 0 || sr >= h || sc < 0 || sc >= w ? T(0) : in[size_t((p * h + sr) * w + sc)]);
      }
  return out;
}

TEST(ImageOps, RandomCropIsPadThenCutAtTheDrawnOffset) {
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (uint64_t sample = 0; sample < 400; ++sample) {
    for (auto [dtype, shape] : {std::pair{DType::u8, std::vector<int64_t>{5, 6}},
                                std::pair{DType::f32, std::vector<int64_t>{2, 4, 3}}}) {
      Feature image = test_image(dtype, shape);
      const Feature original = image;
      SampleRng rng(1, 0, sample, 0), replay(1, 0, sample, 0);
      random_crop(image, 2, rng);
      const int64_t oy = replay.between(0, 4), ox = replay.between(0, 4);
      offsets.insert({oy, ox});
      if (dtype == DType::u8) {
        const auto got = image.values<uint8_t>();
        ASSERT_EQ(std::vector<uint8_t>(got.begin(), got.end()), reference_crop<uint8_t>(original, 2, oy, ox));
      } else {
        const auto got = image.values<float>();
        ASSERT_EQ(std::vector<float>(got.begin(), got.end()), reference_crop<float>(original, 2, oy, ox));
      }
    }
  }
  EXPECT_EQ(offsets.size(), 25u);
}

TEST(ImageOps, FlipMirrorsRowsWhenDrawn) {
  int flipped = 0;
  for (uint64_t sample = 0; sample < 200; ++sample) {
    Feature image = test_image(DType::u8, {2, 3, 4});
    const Feature original = image;
    SampleRng rng(2, 1, sample, 0), replay(2, 1, sample, 0);
    random_flip_horizontal(image, rng);
    const bool flip = replay.bernoulli(0.5);
    flipped += flip;
    const auto in = original.values<uint8_t>();
    const auto out = image.values<uint8_t>();
    for (size_t row = 0; row < 6; ++row)
      for (size_t c = 0; c < 4; ++c) ASSERT_EQ(out[row * 4 + c], in[row * 4 + (flip ? 3 - c : c)]);
  }
  EXPECT_GT(flipped, 60);
  EXPECT_LT(flipped, 140);
}

TEST(ImageOps, DecodeAndNormalise) {
  const Feature raw = Feature::bytes({std::string("\x00\x10\xff\x80", 4)});
  const Feature image = decode_u8_image(raw, {2, 2});
  EXPECT_EQ(image.values<uint8_t>()[2], 255);
  const Feature f = to_normalized_f32(image, 1.0 / 255, 0.5, 0.25);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(f.values<float>()[i], float((image.values<uint8_t>()[i] / 255.0 - 0.5) / 0.25));
  EXPECT_THROW(decode_u8_image(raw, {3, 2}), ConfigError);
}

}  // namespace
}  // namespace cohort::data::image_ops_test
