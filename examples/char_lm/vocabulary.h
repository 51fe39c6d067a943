// Character vocabulary of char_lm: the sorted set of bytes seen in the
// training text, id i being the i-th smallest byte.
//
// The model's vocabulary is padded to a multiple of a number the tensor-
// parallel degree divides (padded_size()), so every mesh trains the same
// model; padded ids never occur in the data and sampling never emits them.
// Bytes the text never held (in a prompt) encode as fallback_id(): the id of
// ' ' when the text had spaces, else id 0.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::examples::char_lm {

class Vocabulary {
 public:
  // ConfigError when `text` is empty.
  static Vocabulary from_text(std::string_view text);

  int64_t size() const { return int64_t(bytes_.size()); }
  // size() rounded up to a multiple of `multiple` (>= 1).
  int64_t padded_size(int64_t multiple) const;

  bool contains(unsigned char byte) const { return ids_[byte] >= 0; }
  int64_t fallback_id() const { return fallback_; }
  // The id of `byte`, or fallback_id() when the text never held it.
  int64_t id_of(unsigned char byte) const { return contains(byte) ? ids_[byte] : fallback_; }
  // The byte of `id`; ConfigError for ids outside [0, size()).
  char byte_of(int64_t id) const;

  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::vector<unsigned char> bytes_;
  std::array<int64_t, 256> ids_{};
  int64_t fallback_ = 0;
};

}  // namespace cohort::examples::char_lm
