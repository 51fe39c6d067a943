#include "examples/char_lm/vocabulary.h"

#include "cohort/common/check.h"

namespace cohort::examples::char_lm {

Vocabulary Vocabulary::from_text(std::string_view text) {
  COHORT_CHECK_AS(ConfigError, !text.empty()) << "cannot build a vocabulary from an empty text";
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  Vocabulary v;
  v.ids_.fill(-1);
  for (int b = 0; b < 256; ++b)
    if (seen[size_t(b)]) {
      v.ids_[size_t(b)] = int64_t(v.bytes_.size());
      v.bytes_.push_back(static_cast<unsigned char>(b));
    }
  v.fallback_ = v.contains(' ') ? v.ids_[' '] : 0;
  return v;
}

int64_t Vocabulary::padded_size(int64_t multiple) const {
  COHORT_CHECK_AS(ConfigError, multiple >= 1) << "vocabulary multiple must be at least 1, got " << multiple;
  return (size() + multiple - 1) / multiple * multiple;
}

char Vocabulary::byte_of(int64_t id) const {
  COHORT_CHECK_AS(ConfigError, id >= 0 && id < size())
      << "character id " << id << " outside the vocabulary of " << size();
  return static_cast<char>(bytes_[size_t(id)]);
}

std::vector<int64_t> Vocabulary::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(id_of(static_cast<unsigned char>(c)));
  return ids;
}

std::string Vocabulary::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) out.push_back(byte_of(id));
  return out;
}

}  // namespace cohort::examples::char_lm
