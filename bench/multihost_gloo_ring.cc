// multihost_gloo_ring: Gloo's own ring allreduce, the peer of
// `cohort-bench allreduce` in bench/multihost_bench.sh.
//
//   cohortrun -H h0,h1,... multihost_gloo_ring --store-dir DIR [--iface eth0]
//       [--bytes 64M] [--iters 3] [--warmup 1]
//
// Uses nothing of cohort but the launcher's variables (COHORT_RANK,
// COHORT_SIZE, COHORT_JOB_ID): Gloo's FileStore in DIR (a directory every
// rank sees; the namespaces of an emulated cluster share the file system),
// Gloo's TCP transport on --iface, and gloo::allreduce with
// Algorithm::RING on float32 sum, out of place into the input, as PyTorch's
// gloo backend runs it. Method as cohort-bench's: one checked call, `warmup`
// untimed calls, a barrier, `iters` timed calls on the steady clock; the
// time is the largest over ranks of the mean per call. Prints cohort-bench's
// CSV line (collective,ranks,size_bytes,count,type,op,time_us,algbw_gbps,
// busbw_gbps,wrong,iters) from rank 0. Exit status 1 on wrong results.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "multihost_gloo_ring: %s\n", message.c_str());
  std::exit(2);
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) usage(std::string(name) + " is not set (start under cohortrun)");
  return std::atoi(v);
}

size_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  size_t v = std::strtoull(text.c_str(), &end, 10);
  const std::string suffix = end;
  if (suffix == "K") v <<= 10;
  else if (suffix == "M") v <<= 20;
  else if (suffix == "G") v <<= 30;
  else if (!suffix.empty()) usage("bad byte count '" + text + "'");
  return v;
}

// The value rank r contributes at element i: small integers, exact in float sums.
float value(int r, size_t i) { return float((i * 7 + size_t(r) * 3) % 13); }

void allreduce(std::shared_ptr<gloo::Context> context, float* data, size_t count, uint32_t tag,
               void (*fn)(void*, const void*, const void*, size_t)) {
  gloo::AllreduceOptions opts(context);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(data, count);
  opts.setReduceFunction(fn);
  opts.setTag(tag);
  gloo::allreduce(opts);
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_dir, iface = "eth0";
  size_t bytes = size_t(64) << 20;
  int iters = 3, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--store-dir") store_dir = v;
    else if (flag == "--iface") iface = v;
    else if (flag == "--bytes") bytes = parse_bytes(v);
    else if (flag == "--iters") iters = std::atoi(v.c_str());
    else if (flag == "--warmup") warmup = std::atoi(v.c_str());
    else usage("unknown flag " + flag);
  }
  if (store_dir.empty()) usage("--store-dir is required");
  if (iters < 1 || warmup < 0) usage("--iters must be positive, --warmup not negative");
  const int rank = env_int("COHORT_RANK");
  const int size = env_int("COHORT_SIZE");
  const char* job = std::getenv("COHORT_JOB_ID");

  gloo::transport::tcp::attr attr;
  attr.iface = iface;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store(job ? job : "job", file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(120));
  context->connectFullMesh(store, device);

  const size_t count = bytes / sizeof(float);
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
  uint32_t tag = 0;
  allreduce(context, data.data(), count, tag++, &gloo::sum<float>);
  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += value(r, i);
    wrong += data[i] != want;
  }
  for (int i = 0; i < warmup; ++i) allreduce(context, data.data(), count, tag++, &gloo::sum<float>);
  gloo::BarrierOptions barrier(context);
  gloo::barrier(barrier);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) allreduce(context, data.data(), count, tag++, &gloo::sum<float>);
  float mean_s = float(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters);
  allreduce(context, &mean_s, 1, tag++, &gloo::max<float>);
  float wrong_total = float(wrong);
  allreduce(context, &wrong_total, 1, tag++, &gloo::sum<float>);
  if (rank == 0) {
    const double algbw = double(bytes) / mean_s / 1e9;
    const double busbw = algbw * 2.0 * (size - 1) / size;
    std::printf("collective,ranks,size_bytes,count,type,op,time_us,algbw_gbps,busbw_gbps,wrong,iters\n");
    std::printf("allreduce,%d,%zu,%zu,f32,sum,%.4f,%.6f,%.6f,%lld,%d\n", size, bytes, count, double(mean_s) * 1e6,
                algbw, busbw, static_cast<long long>(wrong_total), iters);
  }
  return wrong_total == 0 ? 0 : 1;
}
