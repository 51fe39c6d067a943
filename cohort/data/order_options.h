// OrderOptions: how an epoch orders a source's samples (epoch_order.h does
// the ordering): the seed its permutations are keyed by, whether to shuffle,
// and whether ranks are dealt records or whole files. A pipeline takes them
// (pipeline.h) and a cursor records them (cursor.h), so that a cursor is
// restored only into the order it was made for.
#pragma once

#include <cstdint>

namespace cohort::data {

// by_record: positions are samples of a keyed permutation, dealt to the
// ranks round-robin. by_file: whole files in a keyed order, each read
// sequentially by one rank.
enum class Sharding : uint8_t { by_record, by_file };

struct OrderOptions {
  uint64_t seed = 0;
  bool shuffle = true;
  Sharding sharding = Sharding::by_record;
  bool operator==(const OrderOptions&) const = default;
};

}  // namespace cohort::data
