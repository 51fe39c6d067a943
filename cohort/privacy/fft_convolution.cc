#include "cohort/privacy/fft_convolution.h"

#include <fftw3.h>

#include <complex>
#include <memory>
#include <mutex>

#include "cohort/common/check.h"

namespace cohort::privacy {
namespace {

// FFTW's planner is not thread-safe (fftw_execute is): ranks that account at
// once, as threads, plan one at a time.
std::mutex& planner_mutex() {
  static std::mutex mutex;
  return mutex;
}

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};
template <typename T>
using FftwBuffer = std::unique_ptr<T[], FftwFree>;

template <typename T>
FftwBuffer<T> allocate(size_t count) {
  auto* p = static_cast<T*>(fftw_malloc(sizeof(T) * count));
  COHORT_CHECK(p != nullptr) << "fftw_malloc of " << sizeof(T) * count << " bytes failed";
  return FftwBuffer<T>(p);
}

// One real transform pair of length n: forward() fills spectrum() from
// signal(), inverse() the other way (unnormalised, as FFTW).
class RealFft {
 public:
  explicit RealFft(size_t n) : n_(n), signal_(allocate<double>(n)), spectrum_(allocate<fftw_complex>(n / 2 + 1)) {
    std::lock_guard lock(planner_mutex());
    forward_ = fftw_plan_dft_r2c_1d(static_cast<int>(n), signal_.get(), spectrum_.get(), FFTW_ESTIMATE);
    inverse_ = fftw_plan_dft_c2r_1d(static_cast<int>(n), spectrum_.get(), signal_.get(), FFTW_ESTIMATE);
    COHORT_CHECK(forward_ != nullptr && inverse_ != nullptr) << "FFTW could not plan a transform of " << n;
  }
  ~RealFft() {
    std::lock_guard lock(planner_mutex());
    fftw_destroy_plan(forward_);
    fftw_destroy_plan(inverse_);
  }
  RealFft(const RealFft&) = delete;
  RealFft& operator=(const RealFft&) = delete;

  double* signal() { return signal_.get(); }
  std::complex<double>* spectrum() { return reinterpret_cast<std::complex<double>*>(spectrum_.get()); }
  size_t spectrum_size() const { return n_ / 2 + 1; }
  void forward() { fftw_execute(forward_); }
  void inverse() { fftw_execute(inverse_); }

 private:
  size_t n_;
  FftwBuffer<double> signal_;
  FftwBuffer<fftw_complex> spectrum_;
  fftw_plan forward_ = nullptr, inverse_ = nullptr;
};

std::complex<double> power(std::complex<double> z, int64_t n) {
  std::complex<double> result = 1;
  while (n > 0) {
    if (n & 1) result *= z;
    z *= z;
    n >>= 1;
  }
  return result;
}

// FFTW is fastest at sizes with small prime factors.
size_t smooth_size_at_least(size_t n) {
  for (size_t m = n;; ++m) {
    size_t r = m;
    for (size_t p : {2, 3, 5, 7})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

}  // namespace

std::vector<double> circular_convolution_power(std::span<const double> x, int64_t n) {
  COHORT_CHECK_GE(n, 1);
  COHORT_CHECK(!x.empty());
  RealFft fft(x.size());
  std::copy(x.begin(), x.end(), fft.signal());
  fft.forward();
  for (size_t k = 0; k < fft.spectrum_size(); ++k) fft.spectrum()[k] = power(fft.spectrum()[k], n);
  fft.inverse();
  std::vector<double> out(fft.signal(), fft.signal() + x.size());
  const double scale = 1.0 / x.size();
  for (double& v : out) v *= scale;
  return out;
}

std::vector<double> convolve_same(std::span<const double> a, std::span<const double> b) {
  COHORT_CHECK_EQ(a.size(), b.size());
  COHORT_CHECK(!a.empty() && a.size() % 2 == 0) << "convolve_same takes sequences of one even length";
  const size_t n = a.size(), padded = smooth_size_at_least(2 * n - 1);
  RealFft fa(padded), fb(padded);
  std::fill(std::copy(a.begin(), a.end(), fa.signal()), fa.signal() + padded, 0.0);
  std::fill(std::copy(b.begin(), b.end(), fb.signal()), fb.signal() + padded, 0.0);
  fa.forward();
  fb.forward();
  for (size_t k = 0; k < fa.spectrum_size(); ++k) fa.spectrum()[k] *= fb.spectrum()[k];
  fa.inverse();
  std::vector<double> out(n);
  const size_t start = n / 2 - 1;  // (2n - 1 - n) / 2: the centre of the full result
  for (size_t j = 0; j < n; ++j) out[j] = fa.signal()[start + j] / padded;
  return out;
}

}  // namespace cohort::privacy
