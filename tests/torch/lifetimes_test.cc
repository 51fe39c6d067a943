// Lifetimes: objects that hold init()'s engine (DistributedOptimizer,
// DistributedDataParallel, SyncBatchNorm's autograd graph, the multi_worker
// strategy) outlive cohort::shutdown() in user programs. Every use after it
// must raise a ConfigError that names the object, never reach the destroyed
// engine (ASan: make test-asan). One process is the world (no launcher).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "cohort/common/error.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data_parallel/distributed_data_parallel.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "cohort/torch/data_parallel/sync_batch_norm.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::lifetimes_test {
namespace {

class AfterShutdown : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    cohort::init();
  }
  void TearDown() override { cohort::shutdown(); }
};

TEST_F(AfterShutdown, DistributedOptimizerRaises) {
  torch::nn::Linear net(3, 2);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  DistributedOptimizer opt(sgd, net->named_parameters());
  const at::Tensor x = torch::ones({4, 3});
  net(x).sum().backward();
  opt.step();  // works while the world lives
  opt.zero_grad();
  cohort::shutdown();
  const std::string from_backward = config_error_of([&] { net(x).sum().backward(); });
  EXPECT_NE(from_backward.find("DistributedOptimizer was used after cohort::shutdown()"), std::string::npos)
      << from_backward;
  const std::string from_step = config_error_of([&] { opt.step(); });
  EXPECT_NE(from_step.find("DistributedOptimizer was used after cohort::shutdown()"), std::string::npos)
      << from_step;
  // A new world does not revive the old engine for it.
  cohort::init();
  const std::string after_reinit = config_error_of([&] { opt.step(); });
  EXPECT_NE(after_reinit.find("after cohort::shutdown()"), std::string::npos) << after_reinit;
}

TEST_F(AfterShutdown, DistributedDataParallelRaises) {
  torch::nn::Linear net(3, 2);
  DistributedDataParallel ddp(net);
  const at::Tensor x = torch::ones({4, 3});
  ddp(x).sum().backward();
  cohort::shutdown();
  const std::string from_backward = config_error_of([&] { net(x).sum().backward(); });
  EXPECT_NE(from_backward.find("DistributedDataParallel was used after cohort::shutdown()"), std::string::npos)
      << from_backward;
  const std::string from_engine = config_error_of([&] { (void)ddp.engine(); });
  EXPECT_NE(from_engine.find("DistributedDataParallel was used after"), std::string::npos) << from_engine;
}

// A world of one process takes BatchNorm's own path in backward; the forward
// resolves the engine on every call.
TEST_F(AfterShutdown, SyncBatchNormForwardRaises) {
  SyncBatchNorm bn(SyncBatchNormOptions{.num_features = 2});
  const at::Tensor x = torch::randn({4, 2});
  (void)bn(x);
  cohort::shutdown();
  const std::string got = config_error_of([&] { (void)bn(x); });
  EXPECT_NE(got.find("cohort::shutdown() already ran"), std::string::npos) << got;
}

TEST_F(AfterShutdown, MultiWorkerStrategyRaises) {
  MultiWorkerStrategy strategy;
  EXPECT_EQ(strategy.all_sum(torch::ones({2})).sum().item<double>(), 2.0);
  cohort::shutdown();
  const std::string got = config_error_of([&] { (void)strategy.all_sum(torch::ones({2})); });
  EXPECT_NE(got.find("multi_worker strategy was used after cohort::shutdown()"), std::string::npos) << got;
  EXPECT_EQ(strategy.process_count(), 1);  // cached at construction
}

TEST_F(AfterShutdown, FreeCollectivesSayShutdownRan) {
  EXPECT_EQ(cohort::allreduce(torch::ones({2}), {.op = ReduceOp::sum}).sum().item<double>(), 2.0);
  cohort::shutdown();
  const std::string got = config_error_of([] { (void)cohort::allreduce(torch::ones({2})); });
  EXPECT_NE(got.find("cohort::shutdown() already ran"), std::string::npos) << got;
}

}  // namespace
}  // namespace cohort::testing::lifetimes_test
