// tf.train.Example records <-> Features (example.proto).
//
// Parsing maps bytes_list to a bytes feature, float_list to f32 [n],
// int64_list to i64 [n]; a feature with no list set reads as an empty bytes
// list. Building maps the other way and also accepts dense u8 features,
// stored as one bytes value holding the raw elements (how image pixels
// usually travel in an Example); the other dense types have no Example list
// and are a ConfigError. Built records are deterministic: features sorted by
// name, so equal features always give equal bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cohort/data/feature.h"

namespace cohort::data {

// False (with *error set, when given) when `record` is not a valid Example.
bool parse_example(std::span<const uint8_t> record, Features& out, std::string* error = nullptr);

std::string build_example(const Features& features);

}  // namespace cohort::data
