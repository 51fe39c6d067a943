// The lines of a text file, indexed for random access.
//
// Line i is the bytes between the (i-1)-th and i-th '\n', without the '\n'
// (a "\r" before it is kept: the reader does not guess encodings). A last
// line without a final newline still counts; an empty file has no lines.
// The whole file is held in memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::data {

class TextLines {
 public:
  // ConfigError naming the path when it cannot be read.
  static TextLines read(const std::string& path);
  static TextLines from_text(std::string text, std::string name = "<memory>");

  uint64_t size() const { return starts_.size() - 1; }
  std::string_view line(uint64_t i) const {
    return std::string_view(text_).substr(starts_[i], starts_[i + 1] - starts_[i] - 1);
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string text_;              // ends in '\n' (one is added when missing)
  std::vector<uint64_t> starts_;  // line starts, then text_.size()
};

}  // namespace cohort::data
