#include "cohort/torch/data_parallel/powersgd_hook.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <unordered_map>

#include "cohort/common/check.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {
namespace {

class PowerSgdHook final : public CommHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions options) : options_(options), plain_(sum_allreduce_hook()) {
    COHORT_CHECK_AS(ConfigError, options_.rank >= 1) << "PowerSGD: rank must be at least 1, got " << options_.rank;
    COHORT_CHECK_AS(ConfigError, options_.start_iteration >= 0)
        << "PowerSGD: start_iteration must be >= 0, got " << options_.start_iteration;
  }

  std::string name() const override { return "powersgd"; }

  void buckets_rebuilt() override { state_.clear(); }
  bool keeps_bucket_state() const override { return true; }

  void launch(GradBucket& bucket, engine::Engine& engine) override {
    if (bucket.index == 0) ++launched_iterations_;
    State& s = state_[bucket.index];
    s.compressing = launched_iterations_ > options_.start_iteration;
    if (!s.compressing) return plain_->launch(bucket, engine);
    torch::NoGradGuard no_grad;
    if (options_.use_error_feedback) {
      if (!s.error.defined() || s.error.numel() != bucket.buffer.numel())
        s.error = at::zeros_like(bucket.buffer);
      else
        bucket.buffer.add_(s.error);
      s.local = bucket.buffer.clone();  // M_i, to compute next error
    }
    if (s.matrices.empty() && s.exact.empty()) plan(bucket, s);

    const auto opts = bucket.buffer.options();
    if (!s.q.defined() || !options_.warm_start) {
      // Same seed, same order on every rank: identical Q everywhere.
      auto gen = at::detail::createCPUGenerator(options_.seed + 1000003ULL * bucket.index + draws_++);
      std::vector<at::Tensor> qs;
      for (const auto& m : s.matrices) qs.push_back(at::randn({m.cols * m.rank}, gen, opts.dtype(at::kFloat)).to(opts));
      s.q = qs.empty() ? at::empty({0}, opts) : at::cat(qs);
    }
    std::vector<at::Tensor> ps;
    for (const auto& m : s.matrices) ps.push_back(at::matmul(matrix(bucket, m), q_of(s, m)).reshape({-1}));
    s.p = ps.empty() ? at::empty({0}, opts) : at::cat(ps);
    // The bucket holds M_i / size: plain sums are averages.
    if (s.p.numel() > 0) {
      BufferView v = view_of(s.p, "PowerSGD P");
      s.p_handle = engine.submit_ordered_allreduce(v, v, {.op = ReduceOp::sum});
    }
    std::vector<at::Tensor> ex;
    for (size_t i : s.exact) ex.push_back(bucket.gradients[i].reshape({-1}));
    s.exact_flat = ex.empty() ? at::empty({0}, opts) : at::cat(ex);
    if (s.exact_flat.numel() > 0) {
      BufferView v = view_of(s.exact_flat, "PowerSGD uncompressed");
      s.exact_handle = engine.submit_ordered_allreduce(v, v, {.op = ReduceOp::sum});
    }
  }

  void finish(GradBucket& bucket, engine::Engine& engine) override {
    State& s = state_[bucket.index];
    if (!s.compressing) return plain_->finish(bucket, engine);
    torch::NoGradGuard no_grad;
    if (s.p.numel() > 0) {
      s.p_handle.wait();
      std::vector<at::Tensor> qs;
      for (const auto& m : s.matrices) {
        at::Tensor p = s.p.narrow(0, m.p_offset, m.rows * m.rank).view({m.rows, m.rank});
        at::Tensor basis = std::get<0>(at::linalg_qr(p, "reduced"));
        p.copy_(basis);
        qs.push_back(at::matmul(matrix(bucket, m).t(), basis).reshape({-1}));
      }
      s.q = at::cat(qs);
      BufferView v = view_of(s.q, "PowerSGD Q");
      s.q_handle = engine.submit_ordered_allreduce(v, v, {.op = ReduceOp::sum});
      s.q_handle.wait();
      for (const auto& m : s.matrices) {
        at::Tensor p = s.p.narrow(0, m.p_offset, m.rows * m.rank).view({m.rows, m.rank});
        matrix(bucket, m).copy_(at::matmul(p, q_of(s, m).t()));
      }
    }
    if (s.exact_flat.numel() > 0) {
      s.exact_handle.wait();
      int64_t off = 0;
      for (size_t i : s.exact) {
        at::Tensor g = bucket.gradients[i];
        g.copy_(s.exact_flat.narrow(0, off, g.numel()).view_as(g));
        off += g.numel();
      }
    }
    // In the bucket's scale (M_i / size): M_i - approximation, divided by size.
    if (options_.use_error_feedback) s.error = s.local - bucket.buffer * (1.0 / engine.size());
    s.local = at::Tensor();
  }

 private:
  struct Matrix {
    size_t gradient = 0;  // index in the bucket
    int64_t rows = 0, cols = 0, rank = 0;  // rank: min(r, rows, cols)
    int64_t p_offset = 0, q_offset = 0;
  };
  struct State {
    bool compressing = false;
    std::vector<Matrix> matrices;
    std::vector<size_t> exact;
    at::Tensor error, local, p, q, exact_flat;
    engine::Handle p_handle, q_handle, exact_handle;
  };

  void plan(const GradBucket& bucket, State& s) const {
    const int64_t r = options_.rank;
    int64_t p_off = 0, q_off = 0;
    for (size_t i = 0; i < bucket.gradients.size(); ++i) {
      const at::Tensor& g = bucket.gradients[i];
      if (g.dim() >= 2) {
        const int64_t n = g.size(0), m = g.numel() / std::max<int64_t>(n, 1);
        if (double(n) * double(m) > double(n + m) * double(r) * options_.min_compression_rate) {
          const int64_t k = std::min({r, n, m});
          s.matrices.push_back({i, n, m, k, p_off, q_off});
          p_off += n * k;
          q_off += m * k;
          continue;
        }
      }
      s.exact.push_back(i);
    }
  }
  static at::Tensor matrix(const GradBucket& b, const Matrix& m) { return b.gradients[m.gradient].view({m.rows, m.cols}); }
  at::Tensor q_of(const State& s, const Matrix& m) const {
    return s.q.narrow(0, m.q_offset, m.cols * m.rank).view({m.cols, m.rank});
  }

  PowerSgdOptions options_;
  std::shared_ptr<CommHook> plain_;
  std::unordered_map<size_t, State> state_;
  int64_t launched_iterations_ = 0;
  uint64_t draws_ = 0;
};

}  // namespace

std::shared_ptr<CommHook> powersgd_hook(PowerSgdOptions options) { return std::make_shared<PowerSgdHook>(options); }

}  // namespace cohort
