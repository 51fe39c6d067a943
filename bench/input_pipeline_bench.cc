// input_pipeline_bench: cohort's input pipeline on Fashion-MNIST TFRecord
// shards (cohort-data convert), doing the work bench/input_pipeline_peer.py
// does with PyTorch's DataLoader: read each record by index in a global
// shuffle, parse the tf.train.Example, decode the 28x28 u8 image, pad by 4
// and crop back at a random offset, flip left-right with p = 0.5, scale and
// normalise to f32 [1, 28, 28], batch with the int64 labels.
//
//   input_pipeline_bench --data DIR [--batch 64] [--batches N] [--workers W]
//       [--max-workers M] [--prefetch D] [--memory-mb MB] [--consumer-us US]
//       [--seed S] [--epoch E]
//
// --batches 0 (the default) runs one epoch. --workers 0 (the default)
// autotunes in [1, --max-workers] (default: the machine's cores).
// --consumer-us makes the consumer take that long per batch (a slow
// training step), to measure memory under the bound. Prints one JSON line:
// samples/s over the whole run, time to the first batch (from start()),
// peak and baseline resident memory (VmHWM, and VmRSS before start()),
// the pipeline's own peak of ready bytes, and the autotuner's decisions.
// Every batch is checked (shape, dtype, label range, every sample once per
// epoch) so that a fast wrong pipeline cannot pass.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cohort/common/check.h"
#include "cohort/data/image_ops.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/record_source.h"

namespace {

using namespace cohort::data;

struct Options {
  std::string data;
  int64_t batch = 64;
  int64_t batches = 0;
  int workers = 0;
  int max_workers = 0;
  int prefetch = 0;
  double memory_mb = 256;
  int64_t consumer_us = 0;
  uint64_t seed = 1;
  int64_t epoch = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    COHORT_CHECK_AS(ConfigError, i + 1 < argc) << a << " needs a value";
    const std::string v = argv[++i];
    if (a == "--data") o.data = v;
    else if (a == "--batch") o.batch = std::stoll(v);
    else if (a == "--batches") o.batches = std::stoll(v);
    else if (a == "--workers") o.workers = std::stoi(v);
    else if (a == "--max-workers") o.max_workers = std::stoi(v);
    else if (a == "--prefetch") o.prefetch = std::stoi(v);
    else if (a == "--memory-mb") o.memory_mb = std::stod(v);
    else if (a == "--consumer-us") o.consumer_us = std::stoll(v);
    else if (a == "--seed") o.seed = std::stoull(v);
    else if (a == "--epoch") o.epoch = std::stoll(v);
    else COHORT_THROW(ConfigError) << "unknown flag " << a;
  }
  COHORT_CHECK_AS(ConfigError, !o.data.empty()) << "--data DIR is required";
  return o;
}

// kB of a /proc/self/status field ("VmRSS", "VmHWM").
double status_mb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.starts_with(field)) return std::stod(line.substr(std::strlen(field) + 1)) / 1024.0;
  return -1;
}

void augment(Sample& s, SampleRng& rng) {
  Feature image = decode_u8_image(s["image"], {28, 28});
  random_crop(image, 4, rng);
  random_flip_horizontal(image, rng);
  Feature input = to_normalized_f32(image, 1.0 / 255.0, 0.2860, 0.3530);
  input.reshape({1, 28, 28});
  s.features.set("image", std::move(input));
  s["label"].reshape({});
  s.features.erase("image_shape");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const double baseline_mb = status_mb("VmRSS:");
    auto source = std::make_shared<RecordSource>(list_record_files(o.data));
    PipelineOptions po;
    po.order = {.seed = o.seed, .shuffle = true};
    po.batch_size = o.batch;
    po.workers = o.workers;
    po.max_workers = o.max_workers;
    po.prefetch = o.prefetch;
    po.memory_bytes = size_t(o.memory_mb * (1 << 20));
    Pipeline pipeline(source, po);
    pipeline.map(augment);

    const auto t0 = std::chrono::steady_clock::now();
    pipeline.start(o.epoch);
    const int64_t want = o.batches > 0 ? o.batches : pipeline.steps();
    int64_t batches = 0, samples = 0;
    std::set<uint64_t> seen;
    int64_t epoch = o.epoch;
    while (batches < want) {
      auto b = pipeline.next();
      if (!b) {  // the epoch ended before --batches: on to the next
        COHORT_CHECK(seen.size() == source->size()) << "epoch " << epoch << " delivered " << seen.size() << " samples";
        seen.clear();
        pipeline.start(++epoch);
        continue;
      }
      const Feature& image = b->columns.at("image");
      COHORT_CHECK(image.dtype() == cohort::DType::f32 && image.shape() == std::vector<int64_t>({int64_t(b->size()), 1, 28, 28}))
          << "batch image " << image.describe();
      for (int64_t label : b->columns.at("label").values<int64_t>()) COHORT_CHECK(label >= 0 && label < 10) << "label";
      for (uint64_t i : b->indices) COHORT_CHECK(seen.insert(i).second) << "sample " << i << " twice in an epoch";
      samples += int64_t(b->size());
      ++batches;
      if (o.consumer_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o.consumer_us));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const PipelineStats stats = pipeline.stats();
    std::ostringstream decisions;
    for (const AutotuneDecision& d : pipeline.autotune_log())
      decisions << (decisions.tellp() ? "," : "") << "[" << d.at_batch << "," << d.workers << "," << d.depth << "]";
    std::printf(
        "{\"impl\":\"cohort\",\"workers\":%d,\"prefetch\":%d,\"autotuned\":%s,\"batch\":%lld,\"batches\":%lld,"
        "\"samples\":%lld,\"seconds\":%.4f,\"samples_per_s\":%.1f,\"first_batch_s\":%.4f,\"baseline_rss_mb\":%.1f,"
        "\"peak_rss_mb\":%.1f,\"peak_ready_mb\":%.2f,\"memory_bound_mb\":%.1f,\"consumer_us\":%lld,"
        "\"decisions\":[%s]}\n",
        stats.workers, stats.prefetch, o.workers == 0 ? "true" : "false", (long long)o.batch, (long long)batches,
        (long long)samples, seconds, double(samples) / seconds, stats.time_to_first_batch_s, baseline_mb,
        status_mb("VmHWM:"), double(stats.peak_ready_bytes) / (1 << 20), o.memory_mb, (long long)o.consumer_us,
        decisions.str().c_str());
    return 0;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "input_pipeline_bench: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "input_pipeline_bench: %s\n", e.what());
    return 2;
  }
}
