// cohort-bench: bandwidth and latency of cohort's collectives, in the manner
// of nccl-tests' *_perf programs.
//
//   cohortrun -np 4 cohort-bench allreduce [--min-bytes 8] [--max-bytes 256M]
//       [--step-factor 2] [--dtype f32] [--op sum] [--iters N] [--warmup W]
//       [--seconds S] [--root R] [--check 1] [--csv]
//
// For each size of the sweep (min-bytes, min-bytes * step-factor, ... up to
// max-bytes), every rank runs the collective `iters` times between a barrier
// and a second clock reading; the reported time is the largest, over ranks,
// of the average time per call. Unless --iters is given, the count is picked
// per size so that the timed loop takes about --seconds (0.15 s), between 5
// and 100000 calls, from a calibration run that doubles as warm-up; rank 0's
// count is broadcast so that every rank makes the same number of calls.
//
// Columns follow nccl-tests:
//   size   bytes of the buffer the collective is named after, per rank:
//          allreduce, broadcast: the buffer reduced or broadcast;
//          allgather: the whole receive buffer (size() blocks);
//          reduce_scatter: the whole send buffer (size() blocks);
//          alltoall: the whole send (= receive) buffer (size() blocks).
//          Block collectives round the size down to whole blocks (at least one
//          element each); sizes that round to a size already shown are skipped.
//   count  elements in that buffer.
//   algbw  size / time.
//   busbw  algbw * factor, the factor being 2(n-1)/n for allreduce, (n-1)/n
//          for allgather, reduce_scatter and alltoall, and 1 for broadcast:
//          the per-rank traffic of an optimal algorithm, comparable with the
//          hardware's bandwidth whatever n is.
//   #wrong elements of the result that differ from the expected value,
//          summed over ranks (with --check 1, the default).
//
// Correctness: before timing, inputs are filled with a rank- and
// index-dependent pattern of small integers, exactly representable in every
// dtype, the collective runs once and every rank compares its result with a
// float64 reference it computes on its own from the pattern. Results must be
// exact, except f16/bf16 (relative tolerance 2^-10 and 2^-7, 1-2 ulps) and avg on
// f32/f64 (a division: 2^-22 and 2^-50). Integer results wrap like the
// integer type. Any wrong element makes the exit status 1.
//
// Exit status: 0 success, 1 wrong results or a runtime failure, 2 bad flags.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/comm/create.h"
#include "cohort/common/buffer_view.h"
#include "cohort/common/check.h"
#include "cohort/common/dtype.h"
#include "cohort/common/error.h"
#include "cohort/common/reduce_op.h"

namespace {

using cohort::BufferView;
using cohort::ConfigError;
using cohort::DType;
using cohort::ReduceOp;
using cohort::comm::Communicator;

enum class Collective { allreduce, allgather, broadcast, reduce_scatter, alltoall };
constexpr Collective kAllCollectives[] = {Collective::allreduce, Collective::allgather,
                                          Collective::broadcast, Collective::reduce_scatter,
                                          Collective::alltoall};

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce: return "allreduce";
    case Collective::allgather: return "allgather";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::alltoall: return "alltoall";
  }
  return "?";
}

bool is_reduction(Collective c) {
  return c == Collective::allreduce || c == Collective::reduce_scatter;
}

// nccl-tests' bus-bandwidth factors.
double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::allreduce: return 2.0 * (n - 1) / n;
    case Collective::allgather:
    case Collective::reduce_scatter:
    case Collective::alltoall: return static_cast<double>(n - 1) / n;
    case Collective::broadcast: return 1.0;
  }
  return 1.0;
}

constexpr const char* kUsage =
    "usage: cohort-bench <allreduce|allgather|broadcast|reduce_scatter|alltoall|all> [options]\n"
    "  --min-bytes B     smallest size (default 8); suffixes K, M, G are powers of 1024\n"
    "  --max-bytes B     largest size (default 256M)\n"
    "  --step-factor F   multiply the size by F between rows (integer >= 2, default 2)\n"
    "  --dtype T         f32, f64, f16, bf16, i8, u8, i32, i64 (default f32)\n"
    "  --op OP           sum, avg, min, max, product (default sum; reductions only)\n"
    "  --iters N         timed calls per size (default: adaptive, about --seconds per size)\n"
    "  --warmup W        untimed calls before timing (default 5 with --iters, else 1 plus\n"
    "                    the calibration run)\n"
    "  --seconds S       target time of the timed loop per size when adaptive (default 0.15)\n"
    "  --root R          broadcast root (default 0)\n"
    "  --check 0|1       verify every result against a float64 reference (default 1)\n"
    "  --csv             print comma-separated values instead of the table\n"
    "Run it under cohortrun (cohortrun -np 4 cohort-bench allreduce); alone it is one rank.\n";

struct Options {
  std::vector<Collective> collectives;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{256} << 20;
  size_t step_factor = 2;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int64_t iters = 0;    // 0: adaptive
  int64_t warmup = -1;  // -1: default for the mode
  double seconds = 0.15;
  int root = 0;
  bool check = true;
  bool csv = false;
};

constexpr int64_t kMinAdaptiveIters = 5;
constexpr int64_t kMaxAdaptiveIters = 100000;
// The calibration loop runs until one round takes this long.
constexpr double kCalibrationSeconds = 0.02;

// "8", "64K", "256M", "1G", "4KiB", "2MB": K/M/G are powers of 1024, as in
// nccl-tests.
size_t parse_bytes(std::string_view flag, std::string_view text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10)
      COHORT_THROW(ConfigError) << flag << " '" << text << "' is too large";
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) COHORT_THROW(ConfigError) << flag << " expects a byte count such as 8, 64K or 256M, got '" << text << "'";
  std::string_view suffix = text.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 'b': case 'B': shift = 0; break;
      default: shift = -1;
    }
    std::string_view rest = suffix.substr(1);
    bool ok = shift >= 0 && (rest.empty() || (shift > 0 && (rest == "B" || rest == "iB" || rest == "i")) ||
                             (shift == 0 && suffix.size() == 1));
    if (!ok)
      COHORT_THROW(ConfigError) << flag << " has an unknown unit in '" << text << "' (use K, M or G)";
  }
  if (shift > 0 && value > (UINT64_MAX >> shift))
    COHORT_THROW(ConfigError) << flag << " '" << text << "' is too large";
  return static_cast<size_t>(value << shift);
}

int64_t parse_integer(std::string_view flag, std::string_view text, int64_t lo, int64_t hi) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    COHORT_THROW(ConfigError) << flag << " expects an integer in [" << lo << ", " << hi << "], got '" << text << "'";
  return v;
}

double parse_seconds(std::string_view flag, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 3600)
    COHORT_THROW(ConfigError) << flag << " expects seconds in (0, 3600], got '" << text << "'";
  return v;
}

// Returns nullopt when the user asked for --help.
std::optional<Options> parse_args(int argc, char** argv) {
  Options o;
  std::optional<std::string> what;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") return std::nullopt;
    if (!arg.starts_with("-")) {
      if (what) COHORT_THROW(ConfigError) << "unexpected argument '" << arg << "' (collective already given: " << *what << ")";
      what = std::string(arg);
      continue;
    }
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (name == "--csv") {
      if (value) COHORT_THROW(ConfigError) << "--csv takes no value";
      o.csv = true;
      continue;
    }
    static constexpr std::string_view kValued[] = {"--min-bytes", "--max-bytes", "--step-factor",
                                                   "--dtype",     "--op",        "--iters",
                                                   "--warmup",    "--seconds",   "--root",
                                                   "--check"};
    if (std::find(std::begin(kValued), std::end(kValued), name) == std::end(kValued))
      COHORT_THROW(ConfigError) << "unknown flag '" << name << "' (see --help)";
    if (!value) {
      if (i + 1 >= argc) COHORT_THROW(ConfigError) << name << " needs a value";
      value = std::string_view(argv[++i]);
    }
    std::string_view v = *value;
    if (name == "--min-bytes") o.min_bytes = parse_bytes(name, v);
    else if (name == "--max-bytes") o.max_bytes = parse_bytes(name, v);
    else if (name == "--step-factor") o.step_factor = static_cast<size_t>(parse_integer(name, v, 2, 1 << 20));
    else if (name == "--dtype") o.dtype = cohort::parse_dtype(v);
    else if (name == "--op") o.op = cohort::parse_reduce_op(v);
    else if (name == "--iters") o.iters = parse_integer(name, v, 1, int64_t{1} << 40);
    else if (name == "--warmup") o.warmup = parse_integer(name, v, 0, int64_t{1} << 40);
    else if (name == "--seconds") o.seconds = parse_seconds(name, v);
    else if (name == "--root") o.root = static_cast<int>(parse_integer(name, v, 0, 1 << 30));
    else if (name == "--check") o.check = parse_integer(name, v, 0, 1) == 1;
  }
  if (!what) COHORT_THROW(ConfigError) << "missing the collective (allreduce, allgather, broadcast, reduce_scatter, alltoall or all)";
  if (*what == "all") {
    o.collectives.assign(std::begin(kAllCollectives), std::end(kAllCollectives));
  } else {
    for (Collective c : kAllCollectives)
      if (*what == collective_name(c)) o.collectives.push_back(c);
    if (o.collectives.empty())
      COHORT_THROW(ConfigError) << "unknown collective '" << *what
                                << "' (expected allreduce, allgather, broadcast, reduce_scatter, alltoall or all)";
  }
  if (o.min_bytes > o.max_bytes)
    COHORT_THROW(ConfigError) << "--min-bytes (" << o.min_bytes << ") exceeds --max-bytes (" << o.max_bytes << ")";
  if (o.warmup < 0) o.warmup = o.iters > 0 ? 5 : 1;
  return o;
}

// ---------------------------------------------------------------------------
// Element codecs. The bench encodes f16 and bf16 itself rather than through
// cohort's conversion routines, so that the reference does not share code
// with what it checks.

uint16_t encode_f16(double v) {
  if (std::isnan(v)) return 0x7e00;
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  int e = 0;
  std::frexp(a, &e);
  int exponent = e - 1;  // a in [2^exponent, 2^(exponent+1))
  if (a == 0 || exponent < -14) {
    // Subnormal (or zero): a multiple of 2^-24; nearbyint rounds half to even.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  auto q = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 10 - exponent)));  // [1024, 2048]
  // q == 2048 carries into the exponent, which is the right rounding.
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exponent + 15) << 10) + (q - 1024));
}

double decode_f16(uint16_t h) {
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

uint16_t encode_bf16(double v) {
  auto u = std::bit_cast<uint32_t>(static_cast<float>(v));
  if (std::isnan(v)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

double decode_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

template <typename S, bool kFloat, bool kUnsigned>
struct CodecBase {
  using Storage = S;
  static constexpr bool is_float = kFloat;
  static constexpr bool is_unsigned = kUnsigned;
};

struct F32 : CodecBase<float, true, false> {
  static float encode(double v) { return static_cast<float>(v); }
  static double decode(float s) { return s; }
  static constexpr double modulus = 1 << 24;
  static constexpr double tolerance = 0, avg_tolerance = 0x1p-22;
};
struct F64 : CodecBase<double, true, false> {
  static double encode(double v) { return v; }
  static double decode(double s) { return s; }
  static constexpr double modulus = 1 << 24;
  static constexpr double tolerance = 0, avg_tolerance = 0x1p-50;
};
struct F16 : CodecBase<uint16_t, true, false> {
  static uint16_t encode(double v) { return encode_f16(v); }
  static double decode(uint16_t s) { return decode_f16(s); }
  static constexpr double modulus = 2048;  // integers up to 2^11 are exact
  static constexpr double tolerance = 0x1p-10, avg_tolerance = 0x1p-10;  // 1-2 ulps
};
struct BF16 : CodecBase<uint16_t, true, false> {
  static uint16_t encode(double v) { return encode_bf16(v); }
  static double decode(uint16_t s) { return decode_bf16(s); }
  static constexpr double modulus = 256;  // integers up to 2^8 are exact
  static constexpr double tolerance = 0x1p-7, avg_tolerance = 0x1p-7;  // 1-2 ulps
};
template <typename T>
struct Int : CodecBase<T, false, std::is_unsigned_v<T>> {
  // The value an exact integer result takes in T: C++20 conversions wrap.
  static T encode(double v) { return static_cast<T>(static_cast<int64_t>(v)); }
  static double decode(T s) { return static_cast<double>(s); }
  static constexpr double modulus = sizeof(T) == 1 ? (std::is_unsigned_v<T> ? 256 : 128) : (1 << 24);
  static constexpr double tolerance = 0, avg_tolerance = 0;
};

template <typename F>
decltype(auto) with_codec(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(F32{});
    case DType::f64: return f(F64{});
    case DType::f16: return f(F16{});
    case DType::bf16: return f(BF16{});
    case DType::i8: return f(Int<int8_t>{});
    case DType::u8: return f(Int<uint8_t>{});
    case DType::i32: return f(Int<int32_t>{});
    case DType::i64: return f(Int<int64_t>{});
  }
  throw cohort::Error("cohort-bench: unknown dtype");
}

// ---------------------------------------------------------------------------
// Patterns: small integers, exact in every dtype; their reductions over up to
// about 30 ranks stay exact in f16/bf16 (integers wrap as the type does).

template <typename C>
double reduce_pattern(ReduceOp op, int rank, size_t i) {
  auto r = static_cast<uint64_t>(rank);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: {
      double v = static_cast<double>((i * 7 + r * 13) % 9);
      return C::is_unsigned ? v : v - 4;  // [0, 8] or [-4, 4]
    }
    case ReduceOp::min:
    case ReduceOp::max: {
      double v = static_cast<double>((i * 17 + r * 31) % 61);
      return C::is_unsigned ? v : v - 30;
    }
    case ReduceOp::product: {
      // Mostly ones so the product stays small; a 2 on a third of the ranks.
      double v = (i + r) % 3 == 0 ? 2.0 : 1.0;
      return (!C::is_unsigned && (i * 3 + r) % 5 == 0) ? -v : v;
    }
  }
  return 0;
}

template <typename C>
double copy_pattern(int rank, size_t i) {
  return std::fmod(static_cast<double>(i * 7 + static_cast<uint64_t>(rank) * 131), C::modulus);
}

// The expected result at element i of a reduction over ranks 0..n-1, as the
// dtype holds it (already rounded or wrapped).
template <typename C>
double expected_reduction(ReduceOp op, int n, size_t i) {
  double acc = reduce_pattern<C>(op, 0, i);
  for (int q = 1; q < n; ++q) {
    double v = reduce_pattern<C>(op, q, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
      case ReduceOp::product: acc *= v; break;
    }
  }
  if (op == ReduceOp::avg) {
    if constexpr (C::is_float) return acc / n;
    // The sum wraps in the integer type, then divides truncating toward zero.
    auto wrapped = static_cast<int64_t>(C::decode(C::encode(acc)));
    return static_cast<double>(wrapped / n);
  }
  return C::decode(C::encode(acc));
}

template <typename C>
bool matches(double got, double expected, bool avg) {
  double tol = avg ? C::avg_tolerance : C::tolerance;
  if (tol == 0) return got == expected;
  return std::fabs(got - expected) <= tol * std::max(1.0, std::fabs(expected));
}

// ---------------------------------------------------------------------------

// Heap memory aligned to a cache line, left untouched until filled.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes)
      : bytes_(bytes),
        data_(static_cast<std::byte*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)))) {
    if (!data_) COHORT_THROW(Error) << "cannot allocate " << bytes << " bytes";
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::byte* data_;
};

// Counts of one row: the buffers each rank passes and the size reported.
struct Layout {
  size_t send_count = 0;
  size_t recv_count = 0;
  size_t reported_count = 0;  // elements in the buffer "size" refers to
};

Layout layout_for(Collective c, size_t bytes, size_t element, int n) {
  size_t count = bytes / element;
  if (bytes > 0 && count == 0) count = 1;
  size_t block = count / static_cast<size_t>(n);
  if (count > 0 && block == 0) block = 1;
  auto whole = block * static_cast<size_t>(n);
  switch (c) {
    case Collective::allreduce:
    case Collective::broadcast: return {count, count, count};
    case Collective::allgather: return {block, whole, whole};
    case Collective::reduce_scatter: return {whole, block, whole};
    case Collective::alltoall: return {whole, whole, whole};
  }
  return {};
}

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  double seconds = 0;  // max over ranks of the average time per call
  int64_t iters = 0;
  int64_t wrong = 0;  // summed over ranks
};

class Bench {
 public:
  Bench(Communicator& comm, const Options& options) : comm_(comm), o_(options) {}

  // Runs one collective over the sweep; returns the wrong elements in total.
  int64_t run(Collective c) {
    const int n = comm_.size();
    const size_t element = cohort::dtype_size(o_.dtype);
    std::vector<size_t> sizes;
    for (size_t bytes = o_.min_bytes;;) {
      Layout l = layout_for(c, bytes, element, n);
      size_t actual = l.reported_count * element;
      if (sizes.empty() || actual != sizes.back()) sizes.push_back(actual);
      if (bytes == 0) {
        bytes = element;
      } else {
        if (bytes > o_.max_bytes / o_.step_factor) break;
        bytes *= o_.step_factor;
      }
      if (bytes > o_.max_bytes) break;
    }

    // Buffers big enough for the largest row, allocated once.
    Layout largest = layout_for(c, o_.max_bytes, element, n);
    send_ = std::make_unique<AlignedBuffer>(largest.send_count * element);
    recv_ = c == Collective::broadcast ? nullptr
                                       : std::make_unique<AlignedBuffer>(largest.recv_count * element);

    print_header(c);
    int64_t wrong = 0;
    double busbw_sum = 0;
    for (size_t bytes : sizes) {
      Layout l = layout_for(c, bytes, element, n);
      Row row;
      row.bytes = l.reported_count * element;
      row.count = l.reported_count;
      BufferView send{send_->data(), l.send_count, o_.dtype};
      BufferView recv = recv_ ? BufferView{recv_->data(), l.recv_count, o_.dtype} : send;
      std::function<void()> call = make_call(c, send, recv);

      fill(c, l);
      if (o_.check) {
        call();
        row.wrong = count_wrong(c, l);
        // The timed calls reuse the inputs; a broadcast overwrote them.
        if (c == Collective::broadcast) fill(c, l);
      }
      row.seconds = time_row(call, row.iters);
      wrong += row.wrong;
      busbw_sum += busbw(c, row);
      print_row(c, row);
    }
    send_.reset();
    recv_.reset();
    if (comm_.rank() == 0 && !o_.csv) {
      std::printf("# Avg bus bandwidth    : %.3f GB/s\n", sizes.empty() ? 0.0 : busbw_sum / sizes.size());
      if (o_.check)
        std::printf("# Wrong elements       : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
      else
        std::printf("# Wrong elements       : not checked (--check 0)\n");
      std::printf("#\n");
      std::fflush(stdout);
    }
    return wrong;
  }

 private:
  std::function<void()> make_call(Collective c, BufferView send, BufferView recv) {
    switch (c) {
      case Collective::allreduce:
        return [this, send, recv] { comm_.allreduce(send, recv, {.op = o_.op}); };
      case Collective::broadcast: return [this, send] { comm_.broadcast(send, o_.root); };
      case Collective::allgather: return [this, send, recv] { comm_.allgather(send, recv); };
      case Collective::reduce_scatter:
        return [this, send, recv] { comm_.reduce_scatter(send, recv, {.op = o_.op}); };
      case Collective::alltoall: return [this, send, recv] { comm_.alltoall(send, recv); };
    }
    return {};
  }

  // Inputs get the pattern; outputs get a poison value so that a collective
  // that writes nothing is caught.
  void fill(Collective c, const Layout& l) {
    const int rank = comm_.rank();
    const size_t element = cohort::dtype_size(o_.dtype);
    with_codec(o_.dtype, [&](auto codec) {
      using C = decltype(codec);
      auto* send = reinterpret_cast<typename C::Storage*>(send_->data());
      switch (c) {
        case Collective::allreduce:
        case Collective::reduce_scatter:
          for (size_t i = 0; i < l.send_count; ++i) send[i] = C::encode(reduce_pattern<C>(o_.op, rank, i));
          break;
        case Collective::broadcast:
          if (rank == o_.root) {
            for (size_t i = 0; i < l.send_count; ++i) send[i] = C::encode(copy_pattern<C>(rank, i));
          } else {
            std::memset(send, 0xa5, l.send_count * element);
          }
          break;
        case Collective::allgather:
        case Collective::alltoall:
          for (size_t i = 0; i < l.send_count; ++i) send[i] = C::encode(copy_pattern<C>(rank, i));
          break;
      }
    });
    if (recv_) std::memset(recv_->data(), 0xa5, l.recv_count * element);
  }

  // Wrong elements of this rank's result, summed over ranks.
  int64_t count_wrong(Collective c, const Layout& l) {
    const int rank = comm_.rank();
    const int n = comm_.size();
    const bool avg = o_.op == ReduceOp::avg;
    int64_t wrong = with_codec(o_.dtype, [&](auto codec) -> int64_t {
      using C = decltype(codec);
      const auto* out = reinterpret_cast<const typename C::Storage*>(
          c == Collective::broadcast ? send_->data() : recv_->data());
      int64_t bad = 0;
      size_t block = n > 0 ? l.recv_count / static_cast<size_t>(n) : 0;
      switch (c) {
        case Collective::allreduce:
          for (size_t i = 0; i < l.recv_count; ++i)
            bad += !matches<C>(C::decode(out[i]), expected_reduction<C>(o_.op, n, i), avg);
          break;
        case Collective::reduce_scatter: {
          size_t base = static_cast<size_t>(rank) * l.recv_count;
          for (size_t i = 0; i < l.recv_count; ++i)
            bad += !matches<C>(C::decode(out[i]), expected_reduction<C>(o_.op, n, base + i), avg);
          break;
        }
        case Collective::broadcast:
          for (size_t i = 0; i < l.recv_count; ++i)
            bad += C::decode(out[i]) != copy_pattern<C>(o_.root, i);
          break;
        case Collective::allgather:
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < block; ++i)
              bad += C::decode(out[p * block + i]) != copy_pattern<C>(p, i);
          break;
        case Collective::alltoall:
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < block; ++i)
              bad += C::decode(out[p * block + i]) != copy_pattern<C>(p, rank * block + i);
          break;
      }
      return bad;
    });
    comm_.allreduce(BufferView{&wrong, 1, DType::i64}, {.op = ReduceOp::sum});
    return wrong;
  }

  // Seconds for `iters` calls between a barrier and the last call's return,
  // the largest over ranks.
  double time_calls(const std::function<void()>& call, int64_t iters) {
    comm_.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) call();
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm_.allreduce(BufferView{&elapsed, 1, DType::f64}, {.op = ReduceOp::max});
    return elapsed;
  }

  double time_row(const std::function<void()>& call, int64_t& iters) {
    for (int64_t i = 0; i < o_.warmup; ++i) call();
    iters = o_.iters;
    if (iters == 0) {
      // Calibrate: grow the batch until one takes kCalibrationSeconds. Every
      // rank sees the same (max-reduced) time, so all take the same branches.
      int64_t batch = 1;
      double elapsed = time_calls(call, batch);
      while (elapsed < kCalibrationSeconds && batch < kMaxAdaptiveIters) {
        double grow = elapsed > 0 ? 1.5 * kCalibrationSeconds / elapsed : 100.0;
        batch = std::min<int64_t>(kMaxAdaptiveIters,
                                  std::max<int64_t>(2 * batch, static_cast<int64_t>(batch * std::min(grow, 100.0))));
        elapsed = time_calls(call, batch);
      }
      double per_call = elapsed / static_cast<double>(batch);
      iters = per_call > 0 ? static_cast<int64_t>(o_.seconds / per_call) : kMaxAdaptiveIters;
      iters = std::clamp<int64_t>(iters, kMinAdaptiveIters, kMaxAdaptiveIters);
      // Rank 0's count is the count: the decision above is already identical
      // everywhere, this makes it so by construction.
      comm_.broadcast(BufferView{&iters, 1, DType::i64}, 0);
    }
    return time_calls(call, iters) / static_cast<double>(iters);
  }

  double busbw(Collective c, const Row& row) const {
    if (row.seconds <= 0) return 0;
    return static_cast<double>(row.bytes) / row.seconds / 1e9 * bus_factor(c, comm_.size());
  }

  void print_header(Collective c) {
    if (comm_.rank() != 0) return;
    if (o_.csv) {
      if (!csv_header_printed_)
        std::printf("collective,ranks,size_bytes,count,type,op,time_us,algbw_gbps,busbw_gbps,wrong,iters\n");
      csv_header_printed_ = true;
      return;
    }
    std::printf("# cohort-bench %s: %d ranks, backend %s, dtype %s", collective_name(c), comm_.size(),
                comm_.backend().c_str(), std::string(cohort::dtype_name(o_.dtype)).c_str());
    if (is_reduction(c)) std::printf(", op %s", std::string(cohort::reduce_op_name(o_.op)).c_str());
    if (c == Collective::broadcast) std::printf(", root %d", o_.root);
    if (o_.iters > 0)
      std::printf(", %lld iters, %lld warm-up", static_cast<long long>(o_.iters), static_cast<long long>(o_.warmup));
    else
      std::printf(", iters adaptive (~%.2f s per size)", o_.seconds);
    std::printf(", check %s\n", o_.check ? "on" : "off");
    const char* size_meaning = "";
    switch (c) {
      case Collective::allreduce: size_meaning = "the buffer each rank reduces"; break;
      case Collective::broadcast: size_meaning = "the buffer broadcast"; break;
      case Collective::allgather: size_meaning = "each rank's whole receive buffer"; break;
      case Collective::reduce_scatter: size_meaning = "each rank's whole send buffer"; break;
      case Collective::alltoall: size_meaning = "each rank's whole send buffer"; break;
    }
    std::printf("# size: bytes of %s; time: max over ranks of the mean per call\n#\n", size_meaning);
    std::printf("# %13s %12s %6s %8s %12s %12s %12s %8s %8s\n", "size(B)", "count", "type", "op", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong", "iters");
    std::fflush(stdout);
  }

  void print_row(Collective c, const Row& row) {
    if (comm_.rank() != 0) return;
    double algbw = row.seconds > 0 ? static_cast<double>(row.bytes) / row.seconds / 1e9 : 0;
    std::string type(cohort::dtype_name(o_.dtype));
    std::string op = is_reduction(c) ? std::string(cohort::reduce_op_name(o_.op)) : "none";
    // Unchecked rows say so rather than claim 0 wrong: "n/a", or empty in CSV.
    std::string wrong = o_.check ? std::to_string(row.wrong) : (o_.csv ? "" : "n/a");
    if (o_.csv) {
      std::printf("%s,%d,%zu,%zu,%s,%s,%.4f,%.6f,%.6f,%s,%lld\n", collective_name(c), comm_.size(), row.bytes,
                  row.count, type.c_str(), op.c_str(), row.seconds * 1e6, algbw, busbw(c, row), wrong.c_str(),
                  static_cast<long long>(row.iters));
    } else {
      std::printf("  %13zu %12zu %6s %8s %12.2f %12.3f %12.3f %8s %8lld\n", row.bytes, row.count, type.c_str(),
                  op.c_str(), row.seconds * 1e6, algbw, busbw(c, row), wrong.c_str(),
                  static_cast<long long>(row.iters));
    }
    std::fflush(stdout);
  }

  Communicator& comm_;
  const Options& o_;
  std::unique_ptr<AlignedBuffer> send_;
  std::unique_ptr<AlignedBuffer> recv_;
  bool csv_header_printed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::optional<Options> options;
  try {
    options = parse_args(argc, argv);
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohort-bench: %s\n", e.what());
    return 2;
  }
  if (!options) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  int rank = -1;
  try {
    cohort::comm::World world = cohort::comm::init_world();
    Communicator& comm = *world.comm;
    rank = comm.rank();
    if (options->root >= comm.size())
      COHORT_THROW(ConfigError) << "--root " << options->root << " is not a rank of " << comm.size();
    Bench bench(comm, *options);
    int64_t wrong = 0;
    for (Collective c : options->collectives) wrong += bench.run(c);
    if (wrong > 0) {
      if (rank == 0) std::fprintf(stderr, "cohort-bench: %lld wrong elements\n", static_cast<long long>(wrong));
      return 1;
    }
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "cohort-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    if (rank >= 0)
      std::fprintf(stderr, "cohort-bench: rank %d: %s\n", rank, e.what());
    else
      std::fprintf(stderr, "cohort-bench: %s\n", e.what());
    return 1;
  }
}
