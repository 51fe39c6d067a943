#include "cohort/data/text_line_source.h"

#include "cohort/common/check.h"

namespace cohort::data {
namespace {

std::vector<TextLines> read_all(const std::vector<std::string>& files) {
  COHORT_CHECK_AS(ConfigError, !files.empty()) << "a TextLineSource needs at least one file";
  std::vector<TextLines> texts;
  for (const std::string& f : files) texts.push_back(TextLines::read(f));
  return texts;
}

}  // namespace

TextLineSource::TextLineSource(const std::vector<std::string>& files, TextLineSourceOptions options)
    : TextLineSource(read_all(files), options) {}

TextLineSource::TextLineSource(std::vector<TextLines> texts, TextLineSourceOptions options)
    : texts_(std::move(texts)) {
  for (uint32_t f = 0; f < texts_.size(); ++f) {
    uint64_t kept = 0;
    for (uint64_t i = 0; i < texts_[f].size(); ++i) {
      if (options.skip_empty_lines && texts_[f].line(i).empty()) continue;
      lines_.push_back({f, i});
      ++kept;
    }
    file_sizes_.push_back(kept);
  }
}

Sample TextLineSource::read(uint64_t index) const {
  COHORT_CHECK_LT(index, size()) << "sample index out of range";
  const Line& l = lines_[index];
  Sample s;
  s.index = index;
  s.features.set("text", Feature::bytes({std::string(texts_[l.file].line(l.number))}));
  return s;
}

std::string TextLineSource::describe(uint64_t index) const {
  const Line& l = lines_[index];
  return texts_[l.file].name() + " line " + std::to_string(l.number + 1);
}

}  // namespace cohort::data
