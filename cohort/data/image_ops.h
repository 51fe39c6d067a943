// Image decoding and augmentation on dense features, without LibTorch: what
// a pipeline map needs to turn a stored image into a model's input.
//
// An image is a dense feature whose last two dimensions are height and
// width ([H, W] or [C, H, W]), of any dtype. Random choices come from the
// sample's own SampleRng, so an augmented sample is the same bytes whatever
// the thread, worker count or world size.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/data/feature.h"
#include "cohort/data/philox.h"

namespace cohort::data {

// A bytes feature holding one string of raw u8 pixels -> u8[shape].
// ConfigError when the byte count does not match the shape.
Feature decode_u8_image(const Feature& raw, const std::vector<int64_t>& shape);

// Zero-pads by `pad` pixels on every side, then crops back to H x W at an
// offset drawn uniformly from [0, 2 * pad]^2 (the standard "random crop
// with padding").
void random_crop(Feature& image, int64_t pad, SampleRng& rng);

// Mirrors left-right with probability p.
void random_flip_horizontal(Feature& image, SampleRng& rng, double p = 0.5);

// (x * scale - mean) / stddev as f32, same shape: u8 pixels to a
// normalised float image in one pass.
Feature to_normalized_f32(const Feature& image, double scale, double mean, double stddev);

}  // namespace cohort::data
