// The Gaussian noise of DP-SGD, N(0, (sigma C)^2) per coordinate once per
// step for the whole job: not once per rank. The ranks' clipped sums are
// added by the gradient reduction; the noise rides along in one of two ways:
//
//   split       every rank adds an independent N(0, (sigma C)^2 / W): the
//               sum over W ranks has exactly the variance of one draw, and no
//               rank alone knows the noise (the default).
//   designated  rank 0 adds all of it and the others none (Opacus's DPDDP).
//
// Adding ranks therefore never adds noise. Draws are keyed by (seed, step,
// rank), so a step's noise is reproducible and different on every rank and
// step. With `secure`, the normal draws come from OpenSSL's CSPRNG instead,
// and each is the sum of four draws of a quarter of the variance, the
// mitigation Opacus's secure mode uses against floating-point attacks on the
// Gaussian sampler (Mironov 2012; Holohan and Braghin 2021).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace cohort::privacy {

enum class NoiseShare { split, designated };

struct NoiseOptions {
  double noise_multiplier = 0;  // sigma >= 0
  double max_grad_norm = 0;     // C > 0
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool secure = false;
  NoiseShare share = NoiseShare::split;
};

// The standard deviation this rank adds: sigma C / sqrt(W) (split), or sigma
// C on rank 0 and 0 elsewhere (designated). ConfigError for bad options.
double noise_share_std(const NoiseOptions& options);

// Adds this rank's share of step `step`'s noise to each tensor (in place),
// drawn in the tensor's precision (float64 for float64, else float32).
void add_noise_share(const std::vector<torch::Tensor>& gradients, const NoiseOptions& options, int64_t step);

// Normal draws of standard deviation `std` from OpenSSL's RAND_bytes (four
// per value, as above), as a float64 tensor of `count` values.
torch::Tensor secure_normal(int64_t count, double std);

}  // namespace cohort::privacy
