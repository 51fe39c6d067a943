#include "examples/char_lm/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "cohort/common/check.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/record_source.h"

namespace cohort::examples::char_lm {
namespace {

namespace fs = std::filesystem;

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  COHORT_CHECK_AS(ConfigError, in.good()) << "cannot open fortune file " << path.string();
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  COHORT_CHECK_AS(ConfigError, !in.bad()) << "cannot read fortune file " << path.string();
  return text;
}

constexpr const char* kPackageHint =
    "install Debian's 'fortunes' package (apt-get install fortunes) or pass --corpus DIR";

}  // namespace

std::vector<std::string> split_fortunes(std::string_view file_text) {
  std::vector<std::string> out;
  std::string current;
  size_t pos = 0;
  while (pos < file_text.size()) {
    size_t end = file_text.find('\n', pos);
    const bool last = end == std::string_view::npos;
    if (last) end = file_text.size();
    std::string_view line = file_text.substr(pos, end - pos);
    // Files written on other systems may end lines with "\r\n".
    const std::string_view bare = !line.empty() && line.back() == '\r' ? line.substr(0, line.size() - 1) : line;
    if (bare == "%") {
      if (!blank(current)) out.push_back(std::move(current));
      current.clear();
    } else {
      current.append(bare);
      current.push_back('\n');
    }
    pos = last ? end : end + 1;
  }
  if (!blank(current)) out.push_back(std::move(current));
  return out;
}

namespace {

bool is_records(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path.find(".tfrecord") != std::string::npos;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().filename().string().find(".tfrecord") != std::string::npos) return true;
  return false;
}

void join_fortunes(Corpus& c) {
  for (const auto& f : c.fortunes) {
    if (!c.text.empty()) c.text.push_back('\n');
    c.text += f;
  }
}

}  // namespace

Corpus load_corpus_records(const std::string& path) {
  Corpus c;
  c.dir = path;
  std::vector<std::string> files = data::list_record_files(path);
  for (const auto& f : files) c.files.push_back(fs::path(f).filename().string());
  auto source = std::make_shared<data::RecordSource>(std::move(files));
  // In order, one rank; the batches only bound how much is decoded ahead.
  data::Pipeline lines(source, {.order = {.shuffle = false}, .batch_size = 4096, .workers = 2});
  lines.start(0);
  std::string text;
  while (auto batch = lines.next())
    for (const std::string& line : batch->columns.at("text").strings()) {
      text += line;
      text.push_back('\n');
    }
  c.fortunes = split_fortunes(text);
  COHORT_CHECK_AS(ConfigError, !c.fortunes.empty()) << "no fortunes in the " << source->size() << " records of " << path;
  join_fortunes(c);
  return c;
}

Corpus load_corpus(const std::string& dir) {
  if (is_records(dir)) return load_corpus_records(dir);
  std::error_code ec;
  COHORT_CHECK_AS(ConfigError, fs::is_directory(dir, ec))
      << "fortune directory " << dir << " not found: " << kPackageHint;
  Corpus c;
  c.dir = dir;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // No extension: the fortune files themselves (not .dat, .u8, ...);
    // regular files only, which also skips off/ and other directories.
    if (name.find('.') != std::string::npos || !entry.is_regular_file()) continue;
    c.files.push_back(name);
  }
  COHORT_CHECK_AS(ConfigError, !ec) << "cannot list fortune directory " << dir << ": " << ec.message();
  std::sort(c.files.begin(), c.files.end());
  for (const auto& name : c.files)
    for (auto& f : split_fortunes(read_file(fs::path(dir) / name))) c.fortunes.push_back(std::move(f));
  COHORT_CHECK_AS(ConfigError, !c.fortunes.empty()) << "no fortunes in " << dir << " (" << c.files.size()
                                                    << " files without extension, none holding text): " << kPackageHint;
  join_fortunes(c);
  return c;
}

}  // namespace cohort::examples::char_lm
