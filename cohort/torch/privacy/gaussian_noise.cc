#include "cohort/torch/privacy/gaussian_noise.h"

#include <ATen/CPUGeneratorImpl.h>
#include <openssl/rand.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "cohort/common/check.h"
#include "cohort/privacy/counter_hash.h"

namespace cohort::privacy {
namespace {

// A uniform double in (0, 1) from 53 random bits (never 0: Box-Muller takes
// its log).
double uniform_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

double noise_share_std(const NoiseOptions& o) {
  COHORT_CHECK_AS(ConfigError, o.noise_multiplier >= 0) << "noise multiplier must be non-negative, got "
                                                        << o.noise_multiplier;
  COHORT_CHECK_AS(ConfigError, o.max_grad_norm > 0) << "max grad norm must be positive, got " << o.max_grad_norm;
  COHORT_CHECK_AS(ConfigError, o.world_size > 0 && o.rank >= 0 && o.rank < o.world_size)
      << "rank " << o.rank << " of " << o.world_size;
  const double total = o.noise_multiplier * o.max_grad_norm;
  if (o.share == NoiseShare::designated) return o.rank == 0 ? total : 0.0;
  return total / std::sqrt(static_cast<double>(o.world_size));
}

torch::Tensor secure_normal(int64_t count, double std) {
  constexpr int kDraws = 4;  // each value sums four draws of variance std^2 / 4
  std::vector<uint64_t> bits(static_cast<size_t>(count) * kDraws * 2);
  // RAND_bytes takes an int count: fill in chunks of 8 MiB.
  for (size_t at = 0; at < bits.size(); at += size_t{1} << 20) {
    const size_t words = std::min(bits.size() - at, size_t{1} << 20);
    COHORT_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(bits.data() + at), static_cast<int>(words * 8)) == 1)
        << "OpenSSL RAND_bytes failed";
  }
  torch::Tensor out = torch::empty({count}, torch::kFloat64);
  double* values = out.data_ptr<double>();
  const double part = std / std::sqrt(static_cast<double>(kDraws));
  for (int64_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int k = 0; k < kDraws; ++k) {
      const size_t at = (static_cast<size_t>(i) * kDraws + k) * 2;
      // Box-Muller: one standard normal from two uniforms.
      sum += std::sqrt(-2 * std::log(uniform_open(bits[at]))) * std::cos(2 * M_PI * uniform_open(bits[at + 1]));
    }
    values[i] = part * sum;
  }
  return out;
}

void add_noise_share(const std::vector<torch::Tensor>& gradients, const NoiseOptions& o, int64_t step) {
  const double std = noise_share_std(o);
  if (std == 0) return;
  at::Generator generator = at::detail::createCPUGenerator(
      counter_hash(o.seed, static_cast<uint64_t>(step), static_cast<uint64_t>(o.rank)));
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& g : gradients) {
    COHORT_CHECK(g.defined()) << "noise needs a defined gradient (zeros where a rank had no rows)";
    torch::Tensor noise;
    if (o.secure) {
      noise = secure_normal(g.numel(), std).reshape(g.sizes());
    } else {
      // Drawn in the gradient's own precision (as Opacus does): LibTorch
      // vectorises the float32 Box-Muller, which makes the noise of a large
      // model cost a fraction of a step instead of more than the backward.
      // Half precision draws in float32.
      const auto dtype = g.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      noise = at::normal(0.0, std, g.sizes(), generator, torch::TensorOptions().dtype(dtype));
    }
    g.add_(noise.to(g.dtype()));
  }
}

}  // namespace cohort::privacy
