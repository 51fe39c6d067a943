#include "cohort/data/text_lines.h"

#include <cstring>

#include "cohort/data/random_access_file.h"

namespace cohort::data {

TextLines TextLines::from_text(std::string text, std::string name) {
  TextLines t;
  t.name_ = std::move(name);
  t.text_ = std::move(text);
  if (!t.text_.empty() && t.text_.back() != '\n') t.text_.push_back('\n');
  t.starts_.push_back(0);
  const char* base = t.text_.data();
  const char* end = base + t.text_.size();
  for (const char* p = base; p < end;) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)));
    p = nl + 1;  // text_ ends in '\n', so there is always one
    t.starts_.push_back(uint64_t(p - base));
  }
  return t;
}

TextLines TextLines::read(const std::string& path) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  return from_text(std::string(bytes.begin(), bytes.end()), path);
}

}  // namespace cohort::data
