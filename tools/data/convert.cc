// cohort-data convert: IDX images and labels, or text lines, to sharded
// TFRecord files of tf.train.Example records.
//
//   idx:  image  bytes  the image's raw u8 pixels, row-major
//         image_shape int64  the image's dimensions ([28, 28])
//         label  int64
//   text: text   bytes  one line, without its newline
//
// Records are dealt to shards in contiguous runs (shard s holds records
// [s*n/N, (s+1)*n/N)), in input order, as TensorFlow's sharded writers do.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>

#include "cohort/common/check.h"
#include "cohort/data/example.h"
#include "cohort/data/idx_source.h"
#include "cohort/data/record_writer.h"
#include "cohort/data/text_line_source.h"
#include "tools/data/commands.h"

namespace cohort::tools::data {
namespace {

using namespace cohort::data;

std::string shard_name(const ConvertOptions& o, int shard) {
  char name[64];
  std::snprintf(name, sizeof name, "-%05d-of-%05d.tfrecord", shard, o.shards);
  return o.out_dir + "/" + o.prefix + name;
}

// Samples as Examples, into the shards.
void write_shards(const ConvertOptions& o, const Source& source, const std::function<Features(const Sample&)>& to_example) {
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  COHORT_CHECK_AS(ConfigError, !ec) << "cannot create " << o.out_dir << ": " << ec.message();
  const uint64_t n = source.size();
  for (int s = 0; s < o.shards; ++s) {
    const uint64_t begin = n * uint64_t(s) / uint64_t(o.shards), end = n * uint64_t(s + 1) / uint64_t(o.shards);
    RecordWriter writer(shard_name(o, s));
    for (uint64_t i = begin; i < end; ++i) writer.write(build_example(to_example(source.read(i))));
    writer.close();
    std::printf("%s: %" PRIu64 " records, %" PRIu64 " bytes\n", shard_name(o, s).c_str(), writer.records(),
                writer.bytes());
  }
}

}  // namespace

int convert(const ConvertOptions& o) {
  COHORT_CHECK_AS(ConfigError, o.shards >= 1) << "--shards must be at least 1";
  COHORT_CHECK_AS(ConfigError, !o.out_dir.empty()) << "--out DIR is required";
  if (o.kind == "idx") {
    COHORT_CHECK_AS(ConfigError, !o.images.empty() && !o.labels.empty())
        << "convert idx needs --images FILE and --labels FILE";
    const IdxSource source(o.images, o.labels);
    std::vector<int64_t> shape = source.image_shape();
    write_shards(o, source, [&](const Sample& s) {
      Features f;
      f.set("image", s["image"]);  // u8: stored as one bytes value
      f.set("image_shape", Feature::of(shape));
      f.set("label", Feature::of(std::vector<int64_t>{s["label"].values<int64_t>()[0]}));
      return f;
    });
    return 0;
  }
  if (o.kind == "text") {
    COHORT_CHECK_AS(ConfigError, !o.inputs.empty()) << "convert text needs at least one input file";
    const TextLineSource source(o.inputs, {.skip_empty_lines = o.skip_empty_lines});
    COHORT_CHECK_AS(ConfigError, source.size() > 0) << "the input files hold no lines";
    write_shards(o, source, [](const Sample& s) {
      Features f;
      f.set("text", s["text"]);
      return f;
    });
    return 0;
  }
  COHORT_THROW(ConfigError) << "convert: unknown input kind \"" << o.kind << "\" (expected idx or text)";
}

}  // namespace cohort::tools::data
