// Gradient compression for the wire: floating tensors travel as 16-bit
// floats and come back in their own dtype (Horovod's Compression.fp16, plus
// bf16, which keeps float32's range at a coarser precision).
//
// Expected error: the 16-bit rounding of every rank's input and of the
// reduced result (the engine reduces 16-bit inputs in float32): a relative
// error of about 2^-11 per rounding for fp16 and 2^-8 for bf16. fp16
// overflows to inf above 65504 in magnitude; bf16 does not overflow.
// Non-floating and already 16-bit tensors pass through unchanged.
#pragma once

#include <ATen/Tensor.h>

#include <string_view>

namespace cohort {

enum class Compression { none, fp16, bf16 };

std::string_view compression_name(Compression c);
// "none", "fp16", "bf16"; ConfigError otherwise.
Compression parse_compression(std::string_view name);

// The tensor to send: a 16-bit copy of a float32/float64 tensor, else the
// tensor itself. Always contiguous.
at::Tensor compress(const at::Tensor& tensor, Compression c);
// `wire` back in `dtype` (no copy when it already is).
at::Tensor decompress(const at::Tensor& wire, c10::ScalarType dtype);

}  // namespace cohort
