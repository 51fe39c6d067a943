#include "cohort/common/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cohort {
namespace {

#if defined(__x86_64__)
// The head up to a 64-byte boundary and the tail go through memcpy; the
// aligned middle is streamed a cache line at a time.
__attribute__((target("avx512f"))) void stream_avx512(std::byte* d, const std::byte* s, size_t n) {
  for (size_t i = 0; i < n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
  _mm_sfence();
}

__attribute__((target("avx2"))) void stream_avx2(std::byte* d, const std::byte* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32)));
  }
  _mm_sfence();
}

using StreamFn = void (*)(std::byte*, const std::byte*, size_t);

StreamFn pick() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return stream_avx512;
  if (__builtin_cpu_supports("avx2")) return stream_avx2;
  return nullptr;
}

const StreamFn kStream = pick();
#endif

// Below this the copy is likely cache resident anyway, and streaming would
// only push the destination out to memory.
constexpr size_t kStreamMin = 4096;

}  // namespace

void copy_streaming(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
#if defined(__x86_64__)
  if (kStream && bytes >= kStreamMin) {
    const size_t head = (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64;
    std::memcpy(d, s, head);
    const size_t body = (bytes - head) / 64 * 64;
    kStream(d + head, s + head, body);
    std::memcpy(d + head + body, s + head + body, bytes - head - body);
    return;
  }
#endif
  std::memcpy(d, s, bytes);
}

}  // namespace cohort
