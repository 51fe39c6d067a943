#include "cohort/torch/data_parallel/compression.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort {

std::string_view compression_name(Compression c) {
  switch (c) {
    case Compression::none: return "none";
    case Compression::fp16: return "fp16";
    case Compression::bf16: return "bf16";
  }
  return "?";
}

Compression parse_compression(std::string_view name) {
  for (Compression c : {Compression::none, Compression::fp16, Compression::bf16})
    if (compression_name(c) == name) return c;
  COHORT_THROW(ConfigError) << "unknown compression '" << name << "' (expected none, fp16 or bf16)";
  return Compression::none;
}

at::Tensor compress(const at::Tensor& tensor, Compression c) {
  const bool wide_float = tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble;
  if (c == Compression::none || !wide_float) return tensor.contiguous();
  return tensor.to(c == Compression::fp16 ? at::kHalf : at::kBFloat16).contiguous();
}

at::Tensor decompress(const at::Tensor& wire, c10::ScalarType dtype) {
  return wire.scalar_type() == dtype ? wire : wire.to(dtype);
}

}  // namespace cohort
