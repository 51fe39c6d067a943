// broadcast_parameters and broadcast_optimizer_state, ranks as threads:
// parameters and buffers from any root; a late-joining rank with a fresh
// optimizer becomes indistinguishable from the root (SGD momentum, Adam,
// AdamW with amsgrad, learning rates), shown by identical training after
// the broadcast and by the divergence without it.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::broadcast_state_test {
namespace {

namespace nn = torch::nn;

// Parameters plus buffers (BatchNorm's running statistics and counter).
struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", nn::Linear(5, 7));
    bn = register_module("bn", nn::BatchNorm1d(7));
    fc2 = register_module("fc2", nn::Linear(7, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(bn->forward(fc1->forward(x)).relu()); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::BatchNorm1d bn{nullptr};
};

// Fills every parameter and buffer with values particular to `rank`.
void scramble(nn::Module& m, int rank) {
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : m.parameters()) p.copy_(at::arange(p.numel(), at::kFloat).reshape(p.sizes()) * 0.01 + rank + i++);
  for (auto& b : m.buffers()) b.fill_(rank * 10 + i++);
}

std::vector<at::Tensor> state_tensors(nn::Module& m) {
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().clone());
  for (auto& b : m.buffers()) out.push_back(b.detach().clone());
  return out;
}

TEST(BroadcastParameters, ParametersAndBuffersFromAnyRoot) {
  const int n = 3;
  for (int root = 0; root < n; ++root) {
    PerRank<std::vector<at::Tensor>> got(n);
    std::vector<at::Tensor> want;
    {
      auto ref = std::make_shared<Net>();
      scramble(*ref, root);
      want = state_tensors(*ref);
    }
    run_torch_ranks(n, [&](int rank, int) {
      auto net = std::make_shared<Net>();
      scramble(*net, rank);
      const void* storage = net->fc1->weight.data_ptr();
      cohort::broadcast_parameters(*net, root);
      COHORT_CHECK(net->fc1->weight.data_ptr() == storage) << "broadcast must write into the existing tensors";
      got.add(rank, state_tensors(*net));
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(bitwise_equal(got.of(r)[0], want)) << "rank " << r << " root " << root;
  }
}

TEST(BroadcastParameters, ShapeDisagreementIsAMismatchError) {
  std::vector<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    nn::Linear layer(4, rank == 0 ? 3 : 5);
    try {
      cohort::broadcast_parameters(*layer, 0);
    } catch (const MismatchError& e) {
      errors[size_t(rank)] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("weight"), std::string::npos) << "'" << e << "'";
}

enum class Kind { sgd, adam, adamw_amsgrad };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Kind kind, nn::Module& m, double lr) {
  switch (kind) {
    case Kind::sgd:
      return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
    case Kind::adam:
      return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(lr));
    case Kind::adamw_amsgrad:
      return std::make_unique<torch::optim::AdamW>(m.parameters(),
                                                     torch::optim::AdamWOptions(lr).amsgrad(true).weight_decay(0.1));
  }
  return nullptr;
}

at::Tensor batch(int step, int rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(50 + 10 * step + rank);
  return at::randn({8, 5}, gen, at::TensorOptions().dtype(at::kFloat));
}

// Rank 0 trains alone for a few steps (building optimizer state and
// changing its learning rate); rank 1 then joins with a fresh optimizer.
// After the broadcasts both train together; returns each rank's parameters
// after every joint step.
std::vector<std::vector<std::vector<at::Tensor>>> late_join(Kind kind, bool broadcast_state) {
  PerRank<std::vector<at::Tensor>> params(2);
  PerRank<double> lrs(2);
  run_torch_ranks(2, [&](int rank, int) {
    auto net = std::make_shared<Net>();
    scramble(*net, rank);
    auto opt = make_optimizer(kind, *net, rank == 0 ? 0.05 : 0.5);
    if (rank == 0) {
      for (int s = 0; s < 4; ++s) {
        opt->zero_grad();
        net->forward(batch(s, 0)).pow(2).mean().backward();
        opt->step();
      }
      for (auto& g : opt->param_groups()) g.options().set_lr(0.02);
    }
    cohort::broadcast_parameters(*net, 0);
    if (broadcast_state) cohort::broadcast_optimizer_state(*opt, 0);
    lrs.add(rank, opt->param_groups()[0].options().get_lr());
    cohort::DistributedOptimizer dist(*opt, net->named_parameters());
    for (int s = 0; s < 3; ++s) {
      dist.zero_grad();
      net->forward(batch(100 + s, rank)).pow(2).mean().backward();
      dist.step();
      // Parameters only: BatchNorm's running statistics follow each rank's
      // own batches, as in any data-parallel run without SyncBatchNorm.
      params.add(rank, copy_parameters(*net));
    }
  });
  if (broadcast_state) {
    EXPECT_EQ(lrs.of(0)[0], 0.02);
    EXPECT_EQ(lrs.of(1)[0], 0.02) << "the learning rate comes from root";
  }
  return {params.of(0), params.of(1)};
}

class OptimizerState : public ::testing::TestWithParam<Kind> {};

TEST_P(OptimizerState, LateJoiningRankBecomesIdentical) {
  const auto with = late_join(GetParam(), true);
  for (size_t s = 0; s < with[0].size(); ++s)
    EXPECT_TRUE(bitwise_equal(with[0][s], with[1][s])) << "after joint step " << s;
  // Control: without the state broadcast the ranks drift apart, so the test
  // above would catch a broadcast that did nothing.
  const auto without = late_join(GetParam(), false);
  EXPECT_FALSE(bitwise_equal(without[0].back(), without[1].back()));
}

INSTANTIATE_TEST_SUITE_P(Kinds, OptimizerState, ::testing::Values(Kind::sgd, Kind::adam, Kind::adamw_amsgrad),
                         [](const auto& info) {
                           switch (info.param) {
                             case Kind::sgd: return std::string("sgd_momentum");
                             case Kind::adam: return std::string("adam");
                             case Kind::adamw_amsgrad: return std::string("adamw_amsgrad");
                           }
                           return std::string();
                         });

TEST(BroadcastOptimizerState, DifferentOptimizerKindsAreAMismatchError) {
  std::vector<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    auto net = std::make_shared<Net>();
    auto opt = make_optimizer(rank == 0 ? Kind::sgd : Kind::adam, *net, 0.1);
    opt->zero_grad();
    net->forward(batch(0, 0)).pow(2).mean().backward();
    opt->step();
    try {
      cohort::broadcast_optimizer_state(*opt, 0);
    } catch (const MismatchError& e) {
      errors[size_t(rank)] = e.what();
    }
  });
  EXPECT_EQ(errors[0], "") << "root keeps its state";
  EXPECT_NE(errors[1].find("cannot load the optimizer state of rank 0"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace cohort::testing::broadcast_state_test
