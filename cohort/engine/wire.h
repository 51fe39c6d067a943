// The negotiation payload: the uncached requests a rank reports in a cycle,
// serialised as little-endian fixed-width fields (every rank of a group runs
// on the same kind of machine, but the format does not depend on it).
//
//   payload := u32 entry_count, entry*
//   entry   := u32 name_len, name bytes, OpMeta
//   OpMeta  := u8 kind, u8 dtype, u8 op, i32 root, u64 count, u64 row_elements,
//              f64 prescale, f64 postscale, u32 dims, i64 dim*
//
// Reading checks every length against what is left and against the limits
// in op.h, and throws Error on a malformed payload rather than reading past it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cohort/engine/op.h"

namespace cohort::engine {

struct PayloadEntry {
  std::string name;
  OpMeta meta;
};

void append_entry(std::string& payload, const std::string& name, const OpMeta& meta);
// Wraps the entries appended to `body` (without the count) into a payload.
std::string finish_payload(const std::string& body, uint32_t entries);

std::vector<PayloadEntry> parse_payload(std::span<const std::byte> bytes);

}  // namespace cohort::engine
