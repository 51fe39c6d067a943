// Reduction kernels.
//
// Layout of this file:
//   - element codecs: how a stored element is widened to the type the
//     arithmetic runs in, and narrowed back (identity for native types; for
//     bf16, f32 with round-to-nearest-even, two elements per 32-bit word);
//   - ops: one binary function per ReduceOp, generic over the compute type;
//   - two loop shapes, `fresh` (d = s0 op s1 op ...) and `update`
//     (d = d op s0 op ...), over a fixed pack of 1..4 sources, so that each
//     is a plain loop the compiler vectorises;
//   - a driver that runs one pass when all sources fit in one kernel and
//     otherwise walks the arrays in L1-sized blocks, accumulating into the
//     block before moving on, so that any number of sources streams every
//     input from memory exactly once;
//   - one entry point per dtype, compiled for x86-64-v4 (AVX-512 F/BW/DQ/VL),
//     x86-64-v3 (AVX2) and baseline x86-64 (target_clones, resolved once by
//     the dynamic loader), with every kernel inlined into each clone. v4
//     rather than plain avx512f: without BW the 16-bit lanes of bf16 and i8
//     fall back to 256-bit code.
//
// f16 has no conversion the compiler vectorises (GCC 12 keeps _Float16 <->
// float scalar), so its kernels (reduce_f16_kernels.inc) convert with
// AVX-512 or F16C instructions, chosen once at run time, with a scalar
// fallback. The scalar conversions below give bit-identical results to those
// instructions, NaN payloads included, so results never depend on the
// machine.
#include "cohort/common/reduce.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cohort/common/check.h"

// The x86 paths use GCC's target pragmas and attributes. Defining
// COHORT_REDUCE_PORTABLE_ONLY compiles only the portable code, so that tests
// can check it on x86 too.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(COHORT_REDUCE_PORTABLE_ONLY)
#include <immintrin.h>
#define COHORT_X86 1
#else
#define COHORT_X86 0
#endif

// target_clones needs ifunc support (an ELF target). COHORT_REDUCE_NO_AVX512
// leaves the AVX-512 code out, so that tests can run the AVX2 code on a
// machine that has both. Under ThreadSanitizer the kernels are not cloned:
// GCC instruments the ifunc resolvers, which the dynamic loader runs while
// relocating this library, before the TSan runtime is initialised (every
// program linking it segfaulted at start-up in `make test-tsan`).
#if defined(__SANITIZE_THREAD__)
#define COHORT_KERNEL_CLONES
#elif COHORT_X86 && defined(__ELF__) && defined(COHORT_REDUCE_NO_AVX512)
#define COHORT_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#elif COHORT_X86 && defined(__ELF__)
#define COHORT_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define COHORT_KERNEL_CLONES
#endif

// Everything below an entry point must be inlined into it: a kernel compiled
// out of line would be compiled for the baseline target only.
#define COHORT_INLINE inline __attribute__((always_inline))

namespace cohort {
namespace {

// ---------------------------------------------------------------------------
// Scalar half-precision conversions. Inline so that the bf16 ones vectorise
// inside the kernels; the f16 ones are the portable fallback and the tails of
// the F16C paths.

COHORT_INLINE float bf16_bits_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

COHORT_INLINE uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Round to nearest even on the bit pattern: adding 0x7fff plus the lowest
  // kept bit carries into the kept half exactly when the dropped half is
  // above one half, or equal to it and the kept half is odd. This is also
  // right for subnormals and overflows to infinity at the top.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // A NaN keeps its sign and top payload and is made quiet; truncating alone
  // could turn a NaN whose payload lies in the low bits into infinity.
  const uint32_t nan = (u >> 16) | 0x40u;
  // Signed compare: both sides are non-negative, and AVX2 has no unsigned one.
  const bool is_nan = static_cast<int32_t>(u & 0x7fffffffu) > 0x7f800000;
  return static_cast<uint16_t>(is_nan ? nan : rounded);
}

COHORT_INLINE float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    // Inf, or NaN made quiet with its payload kept (as VCVTPH2PS does).
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32. Built from bits rather
    // than float arithmetic so that a flush-to-zero FPU mode cannot touch it
    // (the result is a normal f32 anyway).
    if (mant == 0) return std::bit_cast<float>(sign);
    const int shift = std::countl_zero(mant) - 21;  // brings the top bit to bit 10
    const uint32_t m = (mant << shift) & 0x3ffu;
    const uint32_t e = static_cast<uint32_t>(113 - shift);  // 2^-14 has f32 exponent 113
    return std::bit_cast<float>(sign | (e << 23) | (m << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

COHORT_INLINE uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    // NaN: quiet, sign and top payload bits kept (as VCVTPS2PH does).
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  // 65520 is halfway between the largest half (65504) and 2^16; ties go to
  // the even neighbour, which is infinity.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal result in units of
    // 2^-24. Anything at or below 2^-25 (half a unit) rounds to zero.
    if (a <= 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = a >> 23;  // 102..112 here
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into 2^-14: still right
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) in place, then round the 13
  // dropped bits to nearest even; a carry into the exponent is correct.
  const uint32_t r = a - (112u << 23);
  return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

// ---------------------------------------------------------------------------
// Codecs: Storage is what lives in the buffers, Compute what the op runs on.

template <typename T>
struct NativeCodec {
  using Storage = T;
  using Compute = T;
  static COHORT_INLINE Compute load(Storage v) { return v; }
  static COHORT_INLINE Storage store(Compute v) { return v; }
};

struct Bf16Codec {
  using Storage = uint16_t;
  using Compute = float;
  static COHORT_INLINE Compute load(Storage v) { return bf16_bits_to_f32(v); }
  static COHORT_INLINE Storage store(Compute v) { return f32_to_bf16_bits(v); }
};

// bf16 two at a time: a 32-bit word holds two elements, and each becomes an
// f32 in place, one by a shift and the other by a mask, so the vectorised
// loop needs no lane shuffles to widen or narrow (element by element, the
// compiler has to unpack and repack 16-bit lanes). Either half may be either
// element; loads and stores agree, so byte order does not matter.
// The word is a packed, may_alias struct: bf16 arrays are only 2-byte
// aligned, and a class type (unlike an attributed typedef) keeps both
// properties through template argument deduction.
struct __attribute__((packed, may_alias)) Bf16Word {
  uint32_t bits;
};
static_assert(sizeof(Bf16Word) == 4 && alignof(Bf16Word) == 1);

struct F32Pair {
  float lo, hi;
};

struct Bf16PairCodec {
  using Storage = Bf16Word;
  using Compute = F32Pair;
  static COHORT_INLINE Compute load(Storage w) {
    return {std::bit_cast<float>(w.bits << 16), std::bit_cast<float>(w.bits & 0xffff0000u)};
  }
  static COHORT_INLINE Storage store(Compute p) {
    return {static_cast<uint32_t>(f32_to_bf16_bits(p.lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(p.hi)) << 16)};
  }
};

// ---------------------------------------------------------------------------
// Ops. Integer arithmetic runs in the unsigned type of the same width, so
// overflow wraps without undefined behaviour (the conversion back to the
// signed type is modular since C++20). Float min/max propagate NaN from
// either side, like torch.minimum/maximum, so a diverged rank is visible.

template <typename C>
using UnsignedOf = std::make_unsigned_t<C>;

// u8 * u8 promotes to int and cannot overflow it; a 16-bit unsigned type
// would (65535 * 65535), and there is none in the DType set.
template <typename C>
constexpr bool kNoPromotionOverflow = !std::is_integral_v<C> || sizeof(C) != 2;

struct SumOp {
  template <typename C>
  static COHORT_INLINE C apply(C a, C b) {
    static_assert(kNoPromotionOverflow<C>);
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(static_cast<UnsignedOf<C>>(a) + static_cast<UnsignedOf<C>>(b));
    else
      return a + b;
  }
};

struct ProductOp {
  template <typename C>
  static COHORT_INLINE C apply(C a, C b) {
    static_assert(kNoPromotionOverflow<C>);
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(static_cast<UnsignedOf<C>>(a) * static_cast<UnsignedOf<C>>(b));
    else
      return a * b;
  }
};

struct MinOp {
  template <typename C>
  static COHORT_INLINE C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>)
      return b < a ? b : a;
    else
      return (a < b || a != a) ? a : b;  // b is returned when b is NaN
  }
};

struct MaxOp {
  template <typename C>
  static COHORT_INLINE C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>)
      return b > a ? b : a;
    else
      return (a > b || a != a) ? a : b;
  }
};

// Left fold: ((s0 op s1) op s2) op s3. The driver preserves this order
// across passes, so every path computes the same sequential fold.
template <typename Op, typename C>
COHORT_INLINE C fold(C a) {
  return a;
}
template <typename Op, typename C>
COHORT_INLINE C combine(C a, C b) {
  if constexpr (std::is_same_v<C, F32Pair>)
    return {Op::apply(a.lo, b.lo), Op::apply(a.hi, b.hi)};
  else
    return Op::apply(a, b);
}
template <typename Op, typename C, typename... Rest>
COHORT_INLINE C fold(C a, C b, Rest... rest) {
  return fold<Op>(combine<Op>(a, b), rest...);
}

// ---------------------------------------------------------------------------
// The two loop shapes. Every pointer is restrict: callers never pass
// overlapping arrays (in-place reduction goes through `update`, which reads
// and writes `d` through one pointer).

// d[i] = D::store(s0[i] op s1[i] op ...), sources widened by S.
template <typename Op, typename D, typename S, typename... Src>
COHORT_INLINE void fresh(typename D::Storage* __restrict d, size_t n,
                         const Src* __restrict... s) {
  for (size_t i = 0; i < n; ++i) d[i] = D::store(fold<Op>(S::load(s[i])...));
}

// d[i] = D::store(D::load(d[i]) op s0[i] op s1[i] ...).
template <typename Op, typename D, typename S, typename... Src>
COHORT_INLINE void update(typename D::Storage* __restrict d, size_t n,
                          const Src* __restrict... s) {
  for (size_t i = 0; i < n; ++i)
    d[i] = D::store(fold<Op>(static_cast<typename D::Compute>(D::load(d[i])), S::load(s[i])...));
}

// The same over `m` (1..4) sources taken from `s`, each offset by `off`.
template <typename Op, typename D, typename S>
COHORT_INLINE void fresh_n(typename D::Storage* d, size_t n, const typename S::Storage* const* s,
                           size_t m, size_t off) {
  switch (m) {
    case 1: fresh<Op, D, S>(d, n, s[0] + off); break;
    case 2: fresh<Op, D, S>(d, n, s[0] + off, s[1] + off); break;
    case 3: fresh<Op, D, S>(d, n, s[0] + off, s[1] + off, s[2] + off); break;
    default: fresh<Op, D, S>(d, n, s[0] + off, s[1] + off, s[2] + off, s[3] + off); break;
  }
}

template <typename Op, typename D, typename S>
COHORT_INLINE void update_n(typename D::Storage* d, size_t n, const typename S::Storage* const* s,
                            size_t m, size_t off) {
  switch (m) {
    case 1: update<Op, D, S>(d, n, s[0] + off); break;
    case 2: update<Op, D, S>(d, n, s[0] + off, s[1] + off); break;
    case 3: update<Op, D, S>(d, n, s[0] + off, s[1] + off, s[2] + off); break;
    default: update<Op, D, S>(d, n, s[0] + off, s[1] + off, s[2] + off, s[3] + off); break;
  }
}

constexpr size_t kMaxKernelSources = 4;
// Bytes of the accumulator block per pass: with up to four source blocks of
// the same element count the working set stays inside a 48 KiB L1d.
constexpr size_t kBlockBytes = 8192;

// ---------------------------------------------------------------------------
// Driver for codecs that convert element by element (native types, bf16).
// Preconditions (checked by reduce()): nsrc >= 2, count > 0, dst aliases at
// most srcs[0], and exactly.
template <typename Op, typename Codec>
COHORT_INLINE void reduce_elementwise(typename Codec::Storage* dst,
                                      const typename Codec::Storage* const* srcs, size_t nsrc,
                                      size_t count) {
  using Storage = typename Codec::Storage;
  using Compute = typename Codec::Compute;
  const bool in_place = dst == srcs[0];

  // One pass over the arrays when the sources fit in one kernel.
  if (in_place && nsrc - 1 <= kMaxKernelSources) {
    update_n<Op, Codec, Codec>(dst, count, srcs + 1, nsrc - 1, 0);
    return;
  }
  if (!in_place && nsrc <= kMaxKernelSources) {
    fresh_n<Op, Codec, Codec>(dst, count, srcs, nsrc, 0);
    return;
  }

  if constexpr (std::is_same_v<Codec, NativeCodec<Compute>>) {
    // Native types accumulate in the destination block, which stays in L1
    // while every group of sources is folded into it.
    constexpr size_t kBlock = kBlockBytes / sizeof(Storage);
    for (size_t b = 0; b < count; b += kBlock) {
      const size_t n = std::min(kBlock, count - b);
      size_t k;
      if (in_place) {
        update_n<Op, Codec, Codec>(dst + b, n, srcs + 1, kMaxKernelSources, b);
        k = 1 + kMaxKernelSources;
      } else {
        fresh_n<Op, Codec, Codec>(dst + b, n, srcs, kMaxKernelSources, b);
        k = kMaxKernelSources;
      }
      for (; k < nsrc; k += kMaxKernelSources)
        update_n<Op, Codec, Codec>(dst + b, n, srcs + k, std::min(kMaxKernelSources, nsrc - k), b);
    }
  } else {
    // Narrow types accumulate every source in an f32 block and round once.
    // srcs[0] may be dst: its block is read by the first pass, before the
    // final pass writes dst.
    using Acc = NativeCodec<Compute>;
    constexpr size_t kBlock = kBlockBytes / sizeof(Compute);
    alignas(64) Compute acc[kBlock];
    for (size_t b = 0; b < count; b += kBlock) {
      const size_t n = std::min(kBlock, count - b);
      fresh_n<Op, Acc, Codec>(acc, n, srcs, kMaxKernelSources, b);
      for (size_t k = kMaxKernelSources; k < nsrc; k += kMaxKernelSources)
        update_n<Op, Acc, Codec>(acc, n, srcs + k, std::min(kMaxKernelSources, nsrc - k), b);
      fresh<SumOp, Codec, Acc>(dst + b, n, static_cast<const Compute*>(acc));
    }
  }
}

template <typename Codec>
COHORT_INLINE void reduce_elementwise(ReduceOp op, void* dst, const void* const* srcs, size_t nsrc,
                                      size_t count) {
  using Storage = typename Codec::Storage;
  auto* d = static_cast<Storage*>(dst);
  auto* s = reinterpret_cast<const Storage* const*>(srcs);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: reduce_elementwise<SumOp, Codec>(d, s, nsrc, count); break;
    case ReduceOp::min: reduce_elementwise<MinOp, Codec>(d, s, nsrc, count); break;
    case ReduceOp::max: reduce_elementwise<MaxOp, Codec>(d, s, nsrc, count); break;
    case ReduceOp::product: reduce_elementwise<ProductOp, Codec>(d, s, nsrc, count); break;
  }
}

// One entry point per dtype, each cloned per instruction set.
#define COHORT_DEFINE_REDUCE_ENTRY(name, Codec)                                             \
  COHORT_KERNEL_CLONES void name(ReduceOp op, void* dst, const void* const* srcs, size_t nsrc, \
                                 size_t count) {                                            \
    reduce_elementwise<Codec>(op, dst, srcs, nsrc, count);                                  \
  }
COHORT_DEFINE_REDUCE_ENTRY(reduce_f32, NativeCodec<float>)
COHORT_DEFINE_REDUCE_ENTRY(reduce_f64, NativeCodec<double>)
COHORT_DEFINE_REDUCE_ENTRY(reduce_i8, NativeCodec<int8_t>)
COHORT_DEFINE_REDUCE_ENTRY(reduce_u8, NativeCodec<uint8_t>)
COHORT_DEFINE_REDUCE_ENTRY(reduce_i32, NativeCodec<int32_t>)
COHORT_DEFINE_REDUCE_ENTRY(reduce_i64, NativeCodec<int64_t>)
#undef COHORT_DEFINE_REDUCE_ENTRY

// bf16 averages: every source is widened and scaled by 2^-k, 2^k >= n, which
// is exact (a bf16 value's lowest bit, 2^-133 at the least, stays at or
// above f32's 2^-149 for k <= 16) and keeps the f32 sum of n of them below
// bf16's largest value, so it cannot overflow. The sum is divided by n,
// scaled back (exact) and rounded once. f16 needs no scaling (its largest
// value is 65504), so k is 0 for it.
COHORT_INLINE int average_scale_exponent(DType dtype, size_t contributors) {
  return dtype == DType::bf16 ? std::bit_width(contributors - 1) : 0;
}

COHORT_INLINE void widen_bf16(const uint16_t* __restrict src, float* __restrict dst, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]) * scale;
}

COHORT_INLINE void add_bf16(const uint16_t* __restrict src, float* __restrict acc, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) acc[i] += bf16_bits_to_f32(src[i]) * scale;
}

COHORT_INLINE void narrow_bf16_average(const float* __restrict sum, uint16_t* __restrict dst, size_t n,
                                       float divisor, float unscale) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_bits(sum[i] / divisor * unscale);
}

// dst aliases at most srcs[0], which each block reads before it writes dst.
COHORT_INLINE void average_bf16_sources(uint16_t* dst, const uint16_t* const* srcs, size_t nsrc, size_t count) {
  const int k = average_scale_exponent(DType::bf16, nsrc);
  const float scale = std::ldexp(1.0f, -k), unscale = std::ldexp(1.0f, k);
  constexpr size_t kBlock = kBlockBytes / sizeof(float);
  alignas(64) float acc[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t n = std::min(kBlock, count - b);
    widen_bf16(srcs[0] + b, acc, n, scale);
    for (size_t j = 1; j < nsrc; ++j) add_bf16(srcs[j] + b, acc, n, scale);
    narrow_bf16_average(acc, dst + b, n, static_cast<float>(nsrc), unscale);
  }
}

COHORT_KERNEL_CLONES void widen_bf16_entry(const uint16_t* src, float* dst, size_t count, int contributors) {
  widen_bf16(src, dst, count, std::ldexp(1.0f, -average_scale_exponent(DType::bf16, size_t(contributors))));
}

COHORT_KERNEL_CLONES void narrow_bf16_entry(const float* sum, uint16_t* dst, size_t count, int contributors) {
  const int k = average_scale_exponent(DType::bf16, size_t(contributors));
  narrow_bf16_average(sum, dst, count, static_cast<float>(contributors), std::ldexp(1.0f, k));
}

// bf16 runs over element pairs; an odd last element is folded on its own.
template <typename Op>
COHORT_INLINE void reduce_bf16_element(uint16_t* dst, const uint16_t* const* srcs, size_t nsrc, size_t i) {
  float v = bf16_bits_to_f32(srcs[0][i]);
  for (size_t k = 1; k < nsrc; ++k) v = Op::apply(v, bf16_bits_to_f32(srcs[k][i]));
  dst[i] = f32_to_bf16_bits(v);
}

COHORT_KERNEL_CLONES void reduce_bf16(ReduceOp op, void* dst, const void* const* srcs, size_t nsrc,
                                      size_t count) {
  if (op == ReduceOp::avg) {
    average_bf16_sources(static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(srcs), nsrc, count);
    return;
  }
  if (count >= 2) reduce_elementwise<Bf16PairCodec>(op, dst, srcs, nsrc, count / 2);
  if (count % 2 == 0) return;
  auto* d = static_cast<uint16_t*>(dst);
  auto* s = reinterpret_cast<const uint16_t* const*>(srcs);
  switch (op) {
    case ReduceOp::sum: reduce_bf16_element<SumOp>(d, s, nsrc, count - 1); break;
    case ReduceOp::avg: break;  // averaged above
    case ReduceOp::min: reduce_bf16_element<MinOp>(d, s, nsrc, count - 1); break;
    case ReduceOp::max: reduce_bf16_element<MaxOp>(d, s, nsrc, count - 1); break;
    case ReduceOp::product: reduce_bf16_element<ProductOp>(d, s, nsrc, count - 1); break;
  }
}

// ---------------------------------------------------------------------------
// f16: fused kernels over explicit vectors, compiled once per instruction set
// and chosen once for the running CPU.
//
// A Vec describes one instruction set: W lanes of f32 in a V, loads and
// stores of f16 (converting) and of f32, the four ops, and division. The
// kernels themselves (reduce_f16_kernels.inc) are written once against Vec
// and included inside a `#pragma GCC target` region per instruction set, so
// that every function in them, templates included, is compiled for it. (A
// target attribute cannot depend on a template argument, and generic code
// compiled without the target would not inline the intrinsics.)

// One lane, any CPU: the scalar conversions.
struct F16Scalar {
  using V = float;
  static constexpr size_t W = 1;
  static COHORT_INLINE V load_h(const uint16_t* p) { return f16_bits_to_f32(*p); }
  static COHORT_INLINE void store_h(uint16_t* p, V v) { *p = f32_to_f16_bits(v); }
  static COHORT_INLINE V load_f(const float* p) { return *p; }
  static COHORT_INLINE void store_f(float* p, V v) { *p = v; }
  static COHORT_INLINE V splat(float x) { return x; }
  static COHORT_INLINE V div(V a, V b) { return a / b; }
  template <typename Op>
  static COHORT_INLINE V apply(V a, V b) {
    return Op::apply(a, b);
  }
};

namespace f16_portable {
using Vec = F16Scalar;
#include "cohort/common/reduce_f16_kernels.inc"
}  // namespace f16_portable

#if COHORT_X86
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which the
// uninitialized-use warnings report as false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The min/max instructions return the second operand when either is NaN;
// blending the first back in where it is NaN gives exactly MinOp/MaxOp
// ((a < b || a != a) ? a : b), signed zeros included.

#pragma GCC push_options
#pragma GCC target("avx512f")
struct F16Avx512 {
  using V = __m512;
  static constexpr size_t W = 16;
  static COHORT_INLINE V load_h(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static COHORT_INLINE void store_h(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static COHORT_INLINE V load_f(const float* p) { return _mm512_loadu_ps(p); }
  static COHORT_INLINE void store_f(float* p, V v) { _mm512_storeu_ps(p, v); }
  static COHORT_INLINE V splat(float x) { return _mm512_set1_ps(x); }
  static COHORT_INLINE V div(V a, V b) { return _mm512_div_ps(a, b); }
  template <typename Op>
  static COHORT_INLINE V apply(V a, V b) {
    if constexpr (std::is_same_v<Op, SumOp>) {
      return _mm512_add_ps(a, b);
    } else if constexpr (std::is_same_v<Op, ProductOp>) {
      return _mm512_mul_ps(a, b);
    } else if constexpr (std::is_same_v<Op, MinOp>) {
      return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);
    } else {
      static_assert(std::is_same_v<Op, MaxOp>);
      return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);
    }
  }
};
namespace f16_avx512 {
using Vec = F16Avx512;
#include "cohort/common/reduce_f16_kernels.inc"
}  // namespace f16_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx,f16c")
struct F16Avx {
  using V = __m256;
  static constexpr size_t W = 8;
  static COHORT_INLINE V load_h(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static COHORT_INLINE void store_h(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static COHORT_INLINE V load_f(const float* p) { return _mm256_loadu_ps(p); }
  static COHORT_INLINE void store_f(float* p, V v) { _mm256_storeu_ps(p, v); }
  static COHORT_INLINE V splat(float x) { return _mm256_set1_ps(x); }
  static COHORT_INLINE V div(V a, V b) { return _mm256_div_ps(a, b); }
  template <typename Op>
  static COHORT_INLINE V apply(V a, V b) {
    if constexpr (std::is_same_v<Op, SumOp>) {
      return _mm256_add_ps(a, b);
    } else if constexpr (std::is_same_v<Op, ProductOp>) {
      return _mm256_mul_ps(a, b);
    } else if constexpr (std::is_same_v<Op, MinOp>) {
      return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    } else {
      static_assert(std::is_same_v<Op, MaxOp>);
      return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
  }
};
namespace f16_avx {
using Vec = F16Avx;
#include "cohort/common/reduce_f16_kernels.inc"
}  // namespace f16_avx
#pragma GCC pop_options

#pragma GCC diagnostic pop
#endif  // COHORT_X86

struct F16Kernels {
  decltype(&f16_portable::reduce) reduce = f16_portable::reduce;
  decltype(&f16_portable::average) average = f16_portable::average;
  decltype(&f16_portable::widen) widen = f16_portable::widen;
  decltype(&f16_portable::narrow_average) narrow_average = f16_portable::narrow_average;
};

const F16Kernels& f16_kernels() {
  static const F16Kernels kernels = [] {
    F16Kernels k;
#if COHORT_X86
    __builtin_cpu_init();
#ifdef COHORT_REDUCE_NO_AVX512
    const bool avx512 = false;
#else
    const bool avx512 = __builtin_cpu_supports("avx512f");
#endif
    if (avx512) {
      k = {f16_avx512::reduce, f16_avx512::average, f16_avx512::widen, f16_avx512::narrow_average};
    } else if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) {
      k = {f16_avx::reduce, f16_avx::average, f16_avx::widen, f16_avx::narrow_average};
    }
#endif
    return k;
  }();
  return kernels;
}

// ---------------------------------------------------------------------------
// finish_average kernels. Floats divide (not multiply by a reciprocal) so the
// result is correctly rounded; halves divide in f32 and round once.

template <typename Codec>
COHORT_INLINE void divide_elementwise(void* buf, size_t count, int contributors) {
  using Compute = typename Codec::Compute;
  auto* p = static_cast<typename Codec::Storage*>(buf);
  const Compute n = static_cast<Compute>(contributors);
  for (size_t i = 0; i < count; ++i) p[i] = Codec::store(Codec::load(p[i]) / n);
}

COHORT_KERNEL_CLONES void average_f32(void* buf, size_t count, int n) {
  divide_elementwise<NativeCodec<float>>(buf, count, n);
}
COHORT_KERNEL_CLONES void average_f64(void* buf, size_t count, int n) {
  divide_elementwise<NativeCodec<double>>(buf, count, n);
}
COHORT_KERNEL_CLONES void average_bf16(void* buf, size_t count, int n) {
  divide_elementwise<Bf16Codec>(buf, count, n);
}

// Integer averages truncate toward zero, which is what C++ division does.
template <typename T>
void average_integer(void* buf, size_t count, int contributors) {
  auto* p = static_cast<T*>(buf);
  // Divide in a type wide enough for both operands (contributors may not fit
  // in i8/u8); the quotient always fits back in T.
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  const Wide n = static_cast<Wide>(contributors);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Wide>(p[i]) / n);
}

}  // namespace

void reduce(ReduceOp op, DType dtype, void* dst, std::span<const void* const> srcs, size_t count) {
  COHORT_CHECK(!srcs.empty()) << "reduce needs at least one source";
  if (count == 0) return;
  COHORT_CHECK(dst != nullptr) << "reduce of " << count << " elements into a null buffer";
  for (size_t k = 0; k < srcs.size(); ++k) {
    COHORT_CHECK(srcs[k] != nullptr) << "source " << k << " of " << srcs.size() << " is null";
    if (k > 0) {
      COHORT_CHECK(srcs[k] != dst) << "dst aliases source " << k << "; only srcs[0] may be dst";
    }
  }
  if (srcs.size() == 1) {
    if (dst != srcs[0]) std::memcpy(dst, srcs[0], count * dtype_size(dtype));
    return;
  }
  const void* const* s = srcs.data();
  const size_t n = srcs.size();
  // Halves average inside their kernels (divided before the one rounding);
  // the other types sum, then divide.
  switch (dtype) {
    case DType::f16:
      f16_kernels().reduce(op, static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(s), n,
                           count);
      return;
    case DType::bf16: reduce_bf16(op, dst, s, n, count); return;
    case DType::f32: reduce_f32(op, dst, s, n, count); break;
    case DType::f64: reduce_f64(op, dst, s, n, count); break;
    case DType::i8: reduce_i8(op, dst, s, n, count); break;
    case DType::u8: reduce_u8(op, dst, s, n, count); break;
    case DType::i32: reduce_i32(op, dst, s, n, count); break;
    case DType::i64: reduce_i64(op, dst, s, n, count); break;
    default: COHORT_THROW(Error) << "reduce: unknown dtype " << static_cast<int>(dtype);
  }
  if (op == ReduceOp::avg) finish_average(dtype, dst, count, static_cast<int>(n));
}

bool averages_through_f32(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

void widen_for_average(DType dtype, const void* src, float* wide, size_t count, int contributors) {
  COHORT_CHECK(averages_through_f32(dtype)) << "widen_for_average of " << dtype_name(dtype);
  COHORT_CHECK_GT(contributors, 0) << "widen_for_average needs a positive number of contributors";
  if (count == 0) return;
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == DType::f16)
    f16_kernels().widen(h, wide, count);
  else
    widen_bf16_entry(h, wide, count, contributors);
}

void narrow_average(DType dtype, const float* sum, void* dst, size_t count, int contributors) {
  COHORT_CHECK(averages_through_f32(dtype)) << "narrow_average to " << dtype_name(dtype);
  COHORT_CHECK_GT(contributors, 0) << "narrow_average needs a positive number of contributors";
  if (count == 0) return;
  auto* h = static_cast<uint16_t*>(dst);
  if (dtype == DType::f16)
    f16_kernels().narrow_average(sum, h, count, contributors);
  else
    narrow_bf16_entry(sum, h, count, contributors);
}

void finish_average(DType dtype, void* buf, size_t count, int contributors) {
  COHORT_CHECK_GT(contributors, 0) << "finish_average needs a positive number of contributors";
  if (count == 0 || contributors == 1) return;
  switch (dtype) {
    case DType::f32: average_f32(buf, count, contributors); return;
    case DType::f64: average_f64(buf, count, contributors); return;
    case DType::f16: f16_kernels().average(static_cast<uint16_t*>(buf), count, contributors); return;
    case DType::bf16: average_bf16(buf, count, contributors); return;
    case DType::i8: average_integer<int8_t>(buf, count, contributors); return;
    case DType::u8: average_integer<uint8_t>(buf, count, contributors); return;
    case DType::i32: average_integer<int32_t>(buf, count, contributors); return;
    case DType::i64: average_integer<int64_t>(buf, count, contributors); return;
  }
  COHORT_THROW(Error) << "finish_average: unknown dtype " << static_cast<int>(dtype);
}

float f16_to_f32(uint16_t h) { return f16_bits_to_f32(h); }
uint16_t f32_to_f16(float f) { return f32_to_f16_bits(f); }
float bf16_to_f32(uint16_t h) { return bf16_bits_to_f32(h); }
uint16_t f32_to_bf16(float f) { return f32_to_bf16_bits(f); }

}  // namespace cohort
