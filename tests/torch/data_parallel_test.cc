// DataParallel (one process, several replica threads) against one device:
// the same model, cloned before the first step, trained side by side on the
// same batches. float64 models for tight tolerances, float32 for the usual
// case; BatchNorm in training against a per-shard reference of the
// documented semantics (replica 0's running statistics).
#include "cohort/torch/data_parallel/data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "cohort/common/error.h"
#include "cohort/torch/core/collectives.h"
#include "tests/torch/torch_ranks.h"

namespace {
// A module that is not a torch::nn::Cloneable (TORCH_MODULE wants the
// global namespace).
struct PlainImpl : torch::nn::Module {  // not Cloneable
  PlainImpl() { fc = register_module("fc", torch::nn::Linear(2, 2)); }
  at::Tensor forward(const at::Tensor& x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Plain);
}  // namespace

namespace cohort::data_parallel_test {
namespace {

using testing::config_error_of;
using testing::cross_entropy;
using testing::max_relative_difference;
using torch::nn::Sequential;

Sequential make_mlp(at::ScalarType dtype) {
  torch::manual_seed(7);
  Sequential m(torch::nn::Linear(5, 16), torch::nn::Tanh(), torch::nn::Linear(16, 3));
  m->to(dtype);
  return m;
}

Sequential make_cnn() {
  torch::manual_seed(11);
  Sequential m(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3).padding(1)), torch::nn::BatchNorm2d(4),
               torch::nn::ReLU(), torch::nn::Flatten(), torch::nn::Linear(4 * 5 * 5, 3));
  m->to(at::kDouble);
  return m;
}

Sequential clone_of(Sequential m) {
  return Sequential(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(m->clone()));
}

at::Tensor mse(const at::Tensor& out, const at::Tensor& target) {
  return torch::nn::functional::mse_loss(out, target);
}

// max |a - b| relative to max |b|: the error scale of a whole tensor, which
// single tiny elements of a float32 gradient do not inflate. The floor
// covers gradients that are zero up to rounding (a conv bias followed by
// BatchNorm in training).
double scaled_difference(const at::Tensor& a, const at::Tensor& b, double floor = 1e-6) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), floor);
}

// The largest scaled difference of the gradients of two models' parameters;
// +inf when one has a gradient the other lacks.
double grad_difference(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (size_t k = 0; k < pa.size(); ++k) {
    if (pa[k].grad().defined() != pb[k].grad().defined()) return INFINITY;
    if (!pa[k].grad().defined()) continue;
    worst = std::max(worst, scaled_difference(pa[k].grad(), pb[k].grad()));
  }
  return worst;
}

double parameter_difference(torch::nn::Module& a, torch::nn::Module& b) {
  return max_relative_difference(testing::flat_parameters(a), testing::flat_parameters(b), 1e-3);
}

// Trains `reference` on one device and a DataParallel over its clone for
// `steps` SGD steps; checks loss, gradients and parameters every step.
void expect_equal_training(Sequential reference, int replicas, int64_t rows, at::ScalarType dtype, double tolerance,
                           int steps = 3) {
  SCOPED_TRACE("replicas " + std::to_string(replicas) + ", rows " + std::to_string(rows));
  Sequential main = clone_of(reference);
  DataParallel<Sequential> dp(main, {.replicas = replicas});
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD dp_opt(dp.module()->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    const at::Tensor x = torch::randn({rows, 5}, at::TensorOptions(dtype));
    const at::Tensor y = torch::randn({rows, 3}, at::TensorOptions(dtype));
    ref_opt.zero_grad();
    const at::Tensor ref_loss = mse(reference->forward(x), y);
    ref_loss.backward();
    dp_opt.zero_grad();
    const at::Tensor loss = dp.train_step(x, y, mse);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_LE(max_relative_difference(loss, ref_loss.detach(), 0), tolerance) << "step " << step;
    EXPECT_LE(grad_difference(*dp.module(), *reference), tolerance) << "step " << step;
    ref_opt.step();
    dp_opt.step();
    EXPECT_LE(parameter_difference(*dp.module(), *reference), tolerance) << "step " << step;
  }
}

TEST(DataParallel, MlpFloat64EqualsOneDevice) {
  for (int replicas : {1, 2, 3}) {
    expect_equal_training(make_mlp(at::kDouble), replicas, 12, at::kDouble, 1e-12);
    // Uneven splits: 7 rows over 2 (4 + 3) and 3 (3 + 2 + 2) replicas.
    expect_equal_training(make_mlp(at::kDouble), replicas, 7, at::kDouble, 1e-12);
  }
}

TEST(DataParallel, MlpFloat32EqualsOneDevice) {
  for (int replicas : {2, 3}) expect_equal_training(make_mlp(at::kFloat), replicas, 11, at::kFloat, 1e-5);
}

TEST(DataParallel, OneReplicaIsBitwiseOneDevice) {
  // The worker runs one intra-op thread; so does this thread, so the kernels
  // take the same paths.
  torch::set_num_threads(1);
  Sequential reference = make_mlp(at::kFloat);
  Sequential main = clone_of(reference);
  DataParallel<Sequential> dp(main, {.replicas = 1});
  const at::Tensor x = torch::randn({9, 5}), y = torch::randn({9, 3});
  const at::Tensor ref_loss = mse(reference->forward(x), y);
  ref_loss.backward();
  const at::Tensor loss = dp.train_step(x, y, mse);
  EXPECT_TRUE(at::equal(loss, ref_loss.detach()));
  const auto pa = reference->parameters(), pb = dp.module()->parameters();
  for (size_t k = 0; k < pa.size(); ++k) EXPECT_TRUE(at::equal(pa[k].grad(), pb[k].grad())) << k;
}

TEST(DataParallel, MoreReplicasThanRowsUsesOneRowEach) {
  // 2 rows on 4 replicas: replicas 2 and 3 idle; still the one-device result.
  expect_equal_training(make_mlp(at::kDouble), 4, 2, at::kDouble, 1e-12, 2);
  // And a later bigger batch brings them back.
  expect_equal_training(make_mlp(at::kDouble), 4, 9, at::kDouble, 1e-12, 1);
}

TEST(DataParallel, GradientsAccumulateLikeBackward) {
  Sequential reference = make_mlp(at::kDouble);
  Sequential main = clone_of(reference);
  DataParallel<Sequential> dp(main, {.replicas = 3});
  for (int pass = 0; pass < 2; ++pass) {  // no zero_grad in between
    const at::Tensor x = torch::randn({8, 5}, at::kDouble), y = torch::randn({8, 3}, at::kDouble);
    mse(reference->forward(x), y).backward();
    dp.train_step(x, y, mse);
  }
  EXPECT_LE(grad_difference(*dp.module(), *reference), 1e-12);
}

TEST(DataParallel, ClassifierWithIntegerTargets) {
  Sequential reference = make_mlp(at::kDouble);
  Sequential main = clone_of(reference);
  DataParallel<Sequential> dp(main, {.replicas = 3, .threads_per_replica = 2});
  const at::Tensor x = torch::randn({10, 5}, at::kDouble);
  const at::Tensor y = torch::randint(0, 3, {10}, at::kLong);
  const at::Tensor ref_loss = cross_entropy(reference->forward(x), y);
  ref_loss.backward();
  const at::Tensor loss = dp.train_step(x, y, cross_entropy);
  EXPECT_LE(max_relative_difference(loss, ref_loss.detach(), 0), 1e-12);
  EXPECT_LE(grad_difference(*dp.module(), *reference), 1e-12);
}

// BatchNorm in training: each replica normalises its own shard and the
// running statistics are replica 0's. The reference computes exactly that on
// one module, shard after shard.
TEST(DataParallel, BatchNormTrainingFollowsReplicaZeroSemantics) {
  Sequential reference = make_cnn();
  Sequential main = clone_of(reference);
  const int replicas = 3;
  DataParallel<Sequential> dp(main, {.replicas = replicas});
  torch::optim::SGD ref_opt(reference->parameters(), 0.05);
  torch::optim::SGD dp_opt(dp.module()->parameters(), 0.05);
  for (int step = 0; step < 3; ++step) {
    const int64_t rows = 8;  // 3 + 3 + 2
    const at::Tensor x = torch::randn({rows, 2, 5, 5}, at::kDouble);
    const at::Tensor y = torch::randint(0, 3, {rows}, at::kLong);

    ref_opt.zero_grad();
    std::vector<at::Tensor> before, after_shard0;
    for (const auto& b : reference->buffers()) before.push_back(b.clone());
    at::Tensor ref_loss = torch::zeros({}, at::kDouble);
    for (int i = 0; i < replicas; ++i) {
      const RowBlock s = reduce_scatter_block(rows, replicas, i);
      {
        torch::NoGradGuard no_grad;
        const auto bufs = reference->buffers();
        for (size_t k = 0; k < bufs.size(); ++k) bufs[k].copy_(before[k]);
      }
      const at::Tensor l =
          cross_entropy(reference->forward(x.narrow(0, s.offset, s.rows)), y.narrow(0, s.offset, s.rows));
      const double w = double(s.rows) / double(rows);
      (l * w).backward();
      ref_loss += l.detach() * w;
      if (i == 0)
        for (const auto& b : reference->buffers()) after_shard0.push_back(b.clone());
    }
    {
      torch::NoGradGuard no_grad;
      const auto bufs = reference->buffers();
      for (size_t k = 0; k < bufs.size(); ++k) bufs[k].copy_(after_shard0[k]);
    }

    dp_opt.zero_grad();
    const at::Tensor loss = dp.train_step(x, y, cross_entropy);
    EXPECT_LE(max_relative_difference(loss, ref_loss, 0), 1e-12) << step;
    EXPECT_LE(grad_difference(*dp.module(), *reference), 1e-10) << step;
    const auto rb = reference->buffers(), db = dp.module()->buffers();
    ASSERT_EQ(rb.size(), 3u);  // running_mean, running_var, num_batches_tracked
    for (size_t k = 0; k < rb.size(); ++k)
      EXPECT_TRUE(at::allclose(db[k].to(at::kDouble), rb[k].to(at::kDouble), 1e-12, 1e-14)) << "buffer " << k;
    ref_opt.step();
    dp_opt.step();
  }
  // num_batches_tracked counts steps (replica 0's), not replicas x steps.
  EXPECT_EQ(dp.module()->buffers()[2].item<int64_t>(), 3);
}

// In eval mode BatchNorm uses the running statistics: DataParallel then
// equals one device (the affine parameters and the rest still train).
TEST(DataParallel, CnnWithBatchNormInEvalEqualsOneDevice) {
  Sequential reference = make_cnn();
  {
    // Non-trivial running statistics to normalise with.
    torch::NoGradGuard no_grad;
    reference->forward(torch::randn({16, 2, 5, 5}, at::kDouble) * 3 + 1);
  }
  reference->eval();
  Sequential main = clone_of(reference);
  main->eval();  // clone() does not carry the mode over
  DataParallel<Sequential> dp(main, {.replicas = 2});
  torch::optim::SGD ref_opt(reference->parameters(), 0.05);
  torch::optim::SGD dp_opt(dp.module()->parameters(), 0.05);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor x = torch::randn({7, 2, 5, 5}, at::kDouble);
    const at::Tensor y = torch::randint(0, 3, {7}, at::kLong);
    ref_opt.zero_grad();
    const at::Tensor ref_loss = cross_entropy(reference->forward(x), y);
    ref_loss.backward();
    dp_opt.zero_grad();
    const at::Tensor loss = dp.train_step(x, y, cross_entropy);
    EXPECT_LE(max_relative_difference(loss, ref_loss.detach(), 0), 1e-12);
    EXPECT_LE(grad_difference(*dp.module(), *reference), 1e-10);
    ref_opt.step();
    dp_opt.step();
  }
  EXPECT_LE(parameter_difference(*dp.module(), *reference), 1e-12);
  const at::Tensor x = torch::randn({5, 2, 5, 5}, at::kDouble);
  torch::NoGradGuard no_grad;
  EXPECT_LE(max_relative_difference(dp.forward(x), reference->forward(x), 1e-6), 1e-12);
}

TEST(DataParallel, ForwardGathersOutputsInOrder) {
  Sequential m = make_mlp(at::kFloat);
  for (int replicas : {1, 2, 3}) {
    DataParallel<Sequential> dp(m, {.replicas = replicas});
    for (int64_t rows : {1, 2, 7}) {
      const at::Tensor x = torch::randn({rows, 5});
      const at::Tensor out = dp.forward(x);
      EXPECT_FALSE(out.requires_grad());
      at::Tensor expected;
      {
        torch::NoGradGuard no_grad;
        expected = m->forward(x);
      }
      // Row-wise model: the gathered rows are the module's (up to the
      // kernels' blocking, which may differ for other row counts).
      ASSERT_EQ(out.sizes(), expected.sizes());
      EXPECT_LE(max_relative_difference(out, expected, 1e-3), 1e-5) << replicas << " replicas, " << rows << " rows";
    }
  }
}

// The replicas are copied from the main one every step, so changes made to
// its parameters through raw memory (as broadcasts and checkpoint loads do,
// bumping no version counter) reach every replica.
TEST(DataParallel, ReplicasFollowRawWritesToTheMainParameters) {
  Sequential reference = make_mlp(at::kDouble);
  Sequential main = clone_of(reference);
  DataParallel<Sequential> dp(main, {.replicas = 3});
  const at::Tensor x = torch::randn({9, 5}, at::kDouble), y = torch::randn({9, 3}, at::kDouble);
  dp.train_step(x, y, mse);
  for (auto& p : reference->parameters()) {
    torch::NoGradGuard no_grad;
    p.normal_();
  }
  const auto src = reference->parameters(), dst = dp.module()->parameters();
  for (size_t k = 0; k < src.size(); ++k) std::memcpy(dst[k].data_ptr(), src[k].data_ptr(), size_t(src[k].nbytes()));
  for (auto& p : dp.module()->parameters()) p.mutable_grad().reset();
  const at::Tensor ref_loss = mse(reference->forward(x), y);
  ref_loss.backward();
  const at::Tensor loss = dp.train_step(x, y, mse);
  EXPECT_LE(max_relative_difference(loss, ref_loss.detach(), 0), 1e-12);
  EXPECT_LE(grad_difference(*dp.module(), *reference), 1e-12);
}

TEST(DataParallel, WorkersPersistAcrossSteps) {
  Sequential m = make_mlp(at::kFloat);
  const int replicas = 3;
  DataParallel<Sequential> dp(m, {.replicas = replicas});
  const void* replica1 = dp.replica(1).get();
  EXPECT_NE(replica1, static_cast<const void*>(dp.module().get()));
  std::mutex mutex;
  std::vector<std::set<std::thread::id>> ids(3);
  int step = 0;
  auto loss_fn = [&](const at::Tensor& out, const at::Tensor& target) {
    {
      std::lock_guard lock(mutex);
      ids[size_t(step)].insert(std::this_thread::get_id());
    }
    return mse(out, target);
  };
  for (step = 0; step < 3; ++step) dp.train_step(torch::randn({6, 5}), torch::randn({6, 3}), loss_fn);
  EXPECT_EQ(ids[0].size(), size_t(replicas));
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_EQ(ids[0].count(std::this_thread::get_id()), 0u);
  // sync, compute and reduce: three tasks per replica per step.
  EXPECT_EQ(dp.worker_tasks(), 3 * 3 * replicas);
  EXPECT_EQ(dp.replica(1).get(), replica1);
}

TEST(DataParallel, WorkerExceptionsReachTheCallerAndThePoolSurvives) {
  Sequential m = make_mlp(at::kFloat);
  DataParallel<Sequential> dp(m, {.replicas = 2});
  auto failing = [](const at::Tensor& out, const at::Tensor& target) -> at::Tensor {
    if (out.size(0) == 2) throw std::runtime_error("shard of two rows refused");
    return mse(out, target);
  };
  // 5 rows: shards of 3 and 2; replica 1 throws.
  EXPECT_THROW(dp.train_step(torch::randn({5, 5}), torch::randn({5, 3}), failing), std::runtime_error);
  const at::Tensor loss = dp.train_step(torch::randn({6, 5}), torch::randn({6, 3}), failing);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

TEST(DataParallel, BadUseIsAConfigError) {
  Sequential m = make_mlp(at::kFloat);
  EXPECT_NE(config_error_of([&] { DataParallel<Sequential> dp(m, {.replicas = 0}); }).find("replicas"),
            std::string::npos);
  EXPECT_NE(
      config_error_of([&] { DataParallel<Sequential> dp(m, {.threads_per_replica = 0}); }).find("threads_per_replica"),
      std::string::npos);
  EXPECT_NE(config_error_of([&] {
              DataParallel<Sequential> dp(m, {.devices = {c10::Device(c10::kCUDA, 0)}});
            }).find("devices[0]"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] { DataParallel<Plain> dp(Plain(), {.replicas = 2}); }).find("Cloneable"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] { DataParallel<Sequential> dp(Sequential(nullptr)); }).find("empty"),
            std::string::npos);

  DataParallel<Sequential> dp(m, {.replicas = 2});
  EXPECT_NE(config_error_of([&] {
              dp.train_step(torch::randn({0, 5}), torch::randn({0, 3}), mse);
            }).find("0 rows"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] {
              dp.train_step(torch::randn({4, 5}), torch::randn({3, 3}), mse);
            }).find("target"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] {
              dp.train_step(torch::randn({4, 5}), torch::randn({4, 3}),
                            [](const at::Tensor& out, const at::Tensor& t) { return (out - t).pow(2); });
            }).find("one-element"),
            std::string::npos);
  EXPECT_NE(config_error_of([&] { dp.forward(torch::randn({})); }).find("0-dim"), std::string::npos);
  // One replica of a non-cloneable module needs no clone: allowed.
  DataParallel<Plain> single(Plain(), {.replicas = 1});
  EXPECT_EQ(single.forward(torch::randn({3, 2})).size(0), 3);
  // CPU devices are accepted, one replica each.
  DataParallel<Sequential> cpu(m,
                               {.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCPU), c10::Device(c10::kCPU)}});
  EXPECT_EQ(cpu.replicas(), 3);
}

}  // namespace
}  // namespace cohort::data_parallel_test
