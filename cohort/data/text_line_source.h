// TextLineSource: the lines of text files as samples, each a bytes feature
// "text" holding one line (without its newline). Sharding by file deals
// whole files.
#pragma once

#include <string>
#include <vector>

#include "cohort/data/source.h"
#include "cohort/data/text_lines.h"

namespace cohort::data {

struct TextLineSourceOptions {
  bool skip_empty_lines = false;
};

class TextLineSource final : public Source {
 public:
  // ConfigError naming a file that cannot be read.
  explicit TextLineSource(const std::vector<std::string>& files, TextLineSourceOptions options = {});
  explicit TextLineSource(std::vector<TextLines> texts, TextLineSourceOptions options = {});

  uint64_t size() const override { return lines_.size(); }
  Sample read(uint64_t index) const override;
  std::string describe(uint64_t index) const override;
  std::vector<uint64_t> file_sizes() const override { return file_sizes_; }

 private:
  struct Line {
    uint32_t file;
    uint64_t number;  // in its file
  };
  std::vector<TextLines> texts_;
  std::vector<Line> lines_;
  std::vector<uint64_t> file_sizes_;
};

}  // namespace cohort::data
