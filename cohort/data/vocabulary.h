// Vocabulary: how often each token (a string of a bytes feature) occurs, in
// one mergeable pass, and the top k by count.
//
// Counts are exact (a hash map of every distinct token), so the top k is
// exact too; ties are broken by the token's bytes, so every rank and every
// run lists the same vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cohort/data/gather_bytes.h"
#include "cohort/data/feature.h"

namespace cohort::data {

class Vocabulary {
 public:
  void add(std::string_view token, uint64_t count = 1);
  // Every string of a bytes feature is one token.
  void add(const Feature& f);
  void merge(const Vocabulary& other);
  // Collective: every rank ends with the counts of all ranks.
  void merge_across(const AllgatherBytes& allgather);

  size_t distinct() const { return counts_.size(); }
  uint64_t total() const { return total_; }
  uint64_t count(std::string_view token) const;
  // The k most frequent tokens (all of them for k == 0), most frequent
  // first, equal counts in byte order of the token.
  std::vector<std::pair<std::string, uint64_t>> top(size_t k = 0) const;

  std::vector<uint8_t> serialize() const;
  static Vocabulary deserialize(std::span<const uint8_t> bytes);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, uint64_t, Hash, std::equal_to<>> counts_;
  uint64_t total_ = 0;
};

}  // namespace cohort::data
