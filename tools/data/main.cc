// cohort-data: TFRecord files from the command line.
//
//   cohort-data convert idx --images F --labels F --out DIR [--shards N] [--prefix P]
//   cohort-data convert text --out DIR [--shards N] [--prefix P] [--skip-empty-lines] FILE...
//   cohort-data inspect [--examples] FILE|DIR...
//   cohort-data index FILE|DIR...
//
// Exit status: 0 success; 1 bad data (inspect: a file with a corrupt record,
// named with the byte offset of its frame); 2 bad command line.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/common/check.h"
#include "tools/data/commands.h"

namespace {

constexpr const char* kUsage = R"(usage:
  cohort-data convert idx --images FILE --labels FILE --out DIR [--shards N] [--prefix P]
      IDX images and labels (gzip or plain; Fashion-MNIST's format) to N TFRecord
      files of tf.train.Example {image: bytes, image_shape: int64[], label: int64}
  cohort-data convert text --out DIR [--shards N] [--prefix P] [--skip-empty-lines] FILE...
      lines of text files to tf.train.Example {text: bytes}
  cohort-data inspect [--examples] FILE|DIR...
      count records, check every CRC (and with --examples that each record is a
      tf.train.Example); exit 1 naming the file and byte offset of a bad record
  cohort-data index FILE|DIR...
      write each file's sidecar index FILE.index ("offset size" lines)
A DIR stands for its files whose names contain ".tfrecord". Output files are
named P-SSSSS-of-NNNNN.tfrecord (P defaults to "data") with FILE.index beside.
)";

// The message a user needs: a cohort error without its source location.
std::string plain(const cohort::Error& e) {
  std::string what = e.what();
  if (const auto p = what.find("check failed: "); p != std::string::npos && p < 40) {
    const auto q = what.find(": ", p + 14);
    if (q != std::string::npos) return what.substr(q + 2);
  }
  if (const auto p = what.find(": ConfigError: "); p != std::string::npos && p < 40) return what.substr(p + 15);
  return what;
}

int parse_count(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  COHORT_CHECK_AS(ConfigError, !text.empty() && *end == '\0' && v >= 1 && v <= 100000)
      << flag << " " << text << ": expected a count from 1 to 100000";
  return int(v);
}

int run(int argc, char** argv) {
  using namespace cohort::tools::data;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  std::vector<std::string> positional;
  ConvertOptions convert_options;
  bool examples = false;
  size_t i = 1;
  if (command == "convert") {
    COHORT_CHECK_AS(ConfigError, args.size() > 1) << "convert needs a kind: idx or text";
    convert_options.kind = args[1];
    i = 2;
  }
  auto value = [&](const std::string& flag) -> const std::string& {
    COHORT_CHECK_AS(ConfigError, i + 1 < args.size()) << flag << " needs a value";
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (command == "convert" && a == "--images") convert_options.images = value(a);
    else if (command == "convert" && a == "--labels") convert_options.labels = value(a);
    else if (command == "convert" && a == "--out") convert_options.out_dir = value(a);
    else if (command == "convert" && a == "--prefix") convert_options.prefix = value(a);
    else if (command == "convert" && a == "--shards") convert_options.shards = parse_count(a, value(a));
    else if (command == "convert" && a == "--skip-empty-lines") convert_options.skip_empty_lines = true;
    else if (command == "inspect" && a == "--examples") examples = true;
    else if (a.starts_with("-")) COHORT_THROW(ConfigError) << "unknown flag " << a << " for " << command;
    else positional.push_back(a);
  }
  if (command == "convert") {
    COHORT_CHECK_AS(ConfigError, convert_options.kind == "text" || positional.empty())
        << "unexpected argument " << positional.front();
    convert_options.inputs = positional;
    return convert(convert_options);
  }
  if (command == "inspect") return inspect(positional, examples);
  if (command == "index") return index(positional);
  COHORT_THROW(ConfigError) << "unknown command \"" << command << "\" (expected convert, inspect or index)";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const cohort::ConfigError& e) {
    // Bad flags and bad inputs named on the command line (a missing file):
    // the user's to fix.
    std::fprintf(stderr, "cohort-data: %s\n", plain(e).c_str());
    return 2;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohort-data: %s\n", plain(e).c_str());
    return 1;
  }
}
