// Convolutions of real sequences by FFT (FFTW, float64), for composing
// discretised privacy-loss distributions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cohort::privacy {

// The n-fold circular self-convolution of x (length N): the inverse DFT of
// DFT(x)^n. The powers are taken by repeated squaring, so the relative error
// of each frequency grows with log2(n), not n.
std::vector<double> circular_convolution_power(std::span<const double> x, int64_t n);

// The central a.size() entries of the linear convolution of a and b (both of
// length N, N even): entry j is sum_i a[i] b[j + N/2 - 1 - i], i.e.
// scipy.signal.convolve(a, b, mode="same").
std::vector<double> convolve_same(std::span<const double> a, std::span<const double> b);

}  // namespace cohort::privacy
