#include "cohort/data/vocabulary.h"

#include <algorithm>

#include "cohort/common/check.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

void Vocabulary::add(std::string_view token, uint64_t count) {
  auto it = counts_.find(token);
  if (it == counts_.end()) it = counts_.emplace(std::string(token), 0).first;
  it->second += count;
  total_ += count;
}

void Vocabulary::add(const Feature& f) {
  COHORT_CHECK_AS(ConfigError, f.is_bytes()) << "a vocabulary counts strings; got " << f.describe();
  for (const std::string& s : f.strings()) add(s);
}

void Vocabulary::merge(const Vocabulary& other) {
  for (const auto& [token, count] : other.counts_) add(token, count);
}

void Vocabulary::merge_across(const AllgatherBytes& allgather) {
  Vocabulary all;
  for (const auto& bytes : allgather(serialize())) all.merge(deserialize(bytes));
  *this = std::move(all);
}

uint64_t Vocabulary::count(std::string_view token) const {
  const auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, uint64_t>> Vocabulary::top(size_t k) const {
  std::vector<std::pair<std::string, uint64_t>> all(counts_.begin(), counts_.end());
  auto before = [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; };
  if (k == 0 || k >= all.size()) {
    std::sort(all.begin(), all.end(), before);
  } else {
    std::partial_sort(all.begin(), all.begin() + long(k), all.end(), before);
    all.resize(k);
  }
  return all;
}

std::vector<uint8_t> Vocabulary::serialize() const {
  ByteWriter w;
  w.u64(counts_.size());
  for (const auto& [token, count] : counts_) {
    w.str(token);
    w.u64(count);
  }
  return std::move(w.data());
}

Vocabulary Vocabulary::deserialize(std::span<const uint8_t> bytes) {
  ByteReader r(bytes, "Vocabulary");
  Vocabulary v;
  const uint64_t n = r.u64();
  for (uint64_t i = 0; i < n; ++i) {
    std::string token = r.str();
    v.add(token, r.u64());
  }
  return v;
}

}  // namespace cohort::data
