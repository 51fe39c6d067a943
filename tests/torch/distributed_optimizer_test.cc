// DistributedOptimizer, ranks as threads: n ranks with per-rank batch B/n
// against one plain LibTorch process with batch B (SGD and Adam), bitwise
// agreement of the ranks after every step, gradient accumulation,
// compression error bounds, parameters without gradients, scaling options
// and misuse.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::distributed_optimizer_test {
namespace {

namespace nn = torch::nn;

constexpr int64_t kGlobalBatch = 16, kIn = 6, kOut = 3;

nn::Sequential make_net() {
  return nn::Sequential(nn::Linear(kIn, 12), nn::Tanh(), nn::Linear(12, 8), nn::Tanh(), nn::Linear(8, kOut));
}

// The reference initial parameters, copied into every model so that all
// ranks and the reference start identical (the global RNG is shared by the
// rank threads, so nobody initialises from it inside them).
std::vector<at::Tensor> initial_parameters() {
  static const std::vector<at::Tensor> init = [] {
    torch::manual_seed(7);
    return copy_parameters(*make_net());
  }();
  return init;
}

nn::Sequential make_initialised_net() {
  nn::Sequential net = make_net();
  torch::NoGradGuard no_grad;
  const auto init = initial_parameters();
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
  return net;
}

// Step s's global batch: inputs and regression targets, the same on every
// thread (a generator per call, not the shared global one).
std::pair<at::Tensor, at::Tensor> global_batch(int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  at::Tensor x = at::randn({kGlobalBatch, kIn}, gen, at::TensorOptions().dtype(at::kFloat));
  at::Tensor y = at::randn({kGlobalBatch, kOut}, gen, at::TensorOptions().dtype(at::kFloat));
  return {x, y};
}

enum class OptimizerKind { sgd, adam };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(OptimizerKind kind, nn::Sequential& net) {
  if (kind == OptimizerKind::sgd)
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                                 torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
}

constexpr int kSteps = 6;

// One process, the whole batch, no cohort: the ground truth.
std::vector<at::Tensor> reference_run(OptimizerKind kind) {
  torch::set_num_threads(1);
  nn::Sequential net = make_initialised_net();
  auto opt = make_optimizer(kind, net);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    opt->zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    opt->step();
  }
  return copy_parameters(*net);
}

struct EquivalenceCase {
  int ranks;
  OptimizerKind kind;
};

class Equivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(Equivalence, RanksWithSplitBatchMatchOneRankWithWholeBatch) {
  const auto [n, kind] = GetParam();
  const std::vector<at::Tensor> want = reference_run(kind);
  PerRank<std::vector<at::Tensor>> after_step(n);
  run_torch_ranks(n, [&](int rank, int size) {
    nn::Sequential net = make_initialised_net();
    auto opt = make_optimizer(kind, net);
    cohort::DistributedOptimizer dist(*opt, net->named_parameters());
    COHORT_CHECK(dist.num_reduced_parameters() == 6) << dist.num_reduced_parameters();
    const int64_t per_rank = kGlobalBatch / size;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = global_batch(s);
      dist.zero_grad();
      torch::mse_loss(net->forward(x.narrow(0, rank * per_rank, per_rank)), y.narrow(0, rank * per_rank, per_rank))
          .backward();
      dist.step();
      after_step.add(rank, copy_parameters(*net));
    }
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(after_step.of(r).size(), size_t(kSteps));
    for (int s = 0; s < kSteps; ++s)
      EXPECT_TRUE(bitwise_equal(after_step.of(r)[size_t(s)], after_step.of(0)[size_t(s)]))
          << "rank " << r << " differs from rank 0 after step " << s;
  }
  const auto& got = after_step.of(0).back();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], want[i], /*rtol=*/1e-5, /*atol=*/1e-6))
        << "parameter " << i << ": max |diff| " << (got[i] - want[i]).abs().max().item<double>();
  }
  // The comparison is not vacuous: training moved the parameters.
  EXPECT_GT((want[0] - initial_parameters()[0]).abs().max().item<double>(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Equivalence,
                         ::testing::Values(EquivalenceCase{1, OptimizerKind::sgd}, EquivalenceCase{2, OptimizerKind::sgd},
                                           EquivalenceCase{4, OptimizerKind::sgd}, EquivalenceCase{2, OptimizerKind::adam},
                                           EquivalenceCase{4, OptimizerKind::adam}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  (info.param.kind == OptimizerKind::sgd ? "sgd" : "adam");
                         });

TEST(DistributedOptimizer, BackwardPassesPerStepEqualsOneStepWithTheWholeBatch) {
  const std::vector<at::Tensor> want = reference_run(OptimizerKind::sgd);
  for (int k : {2, 4}) {
    PerRank<std::vector<at::Tensor>> result(2);
    run_torch_ranks(2, [&](int rank, int size) {
      nn::Sequential net = make_initialised_net();
      auto opt = make_optimizer(OptimizerKind::sgd, net);
      cohort::DistributedOptimizer dist(*opt, net->named_parameters(), {.backward_passes_per_step = k});
      const int64_t micro = kGlobalBatch / (size * k);
      for (int s = 0; s < kSteps; ++s) {
        auto [x, y] = global_batch(s);
        dist.zero_grad();
        for (int pass = 0; pass < k; ++pass) {
          const int64_t start = (rank * k + pass) * micro;
          torch::mse_loss(net->forward(x.narrow(0, start, micro)), y.narrow(0, start, micro)).backward();
        }
        dist.step();
      }
      result.add(rank, copy_parameters(*net));
    });
    EXPECT_TRUE(bitwise_equal(result.of(0)[0], result.of(1)[0])) << "k=" << k;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(at::allclose(result.of(0)[0][i], want[i], 1e-5, 1e-6))
          << "k=" << k << " parameter " << i << ": max |diff| "
          << (result.of(0)[0][i] - want[i]).abs().max().item<double>();
  }
}

TEST(DistributedOptimizer, MoreBackwardPassesThanDeclaredIsAnError) {
  run_torch_ranks(1, [&](int, int) {
    nn::Sequential net = make_initialised_net();
    auto opt = make_optimizer(OptimizerKind::sgd, net);
    cohort::DistributedOptimizer dist(*opt, net->named_parameters(), {.backward_passes_per_step = 1});
    auto [x, y] = global_batch(0);
    torch::mse_loss(net->forward(x), y).backward();
    std::string message;
    try {
      torch::mse_loss(net->forward(x), y).backward();
    } catch (const std::exception& e) {
      message = e.what();
    }
    COHORT_CHECK(message.find("more than backward_passes_per_step = 1") != std::string::npos) << message;
    dist.step();  // still usable
  });
}

// This backward pass's gradient of each parameter, captured by a tensor hook
// before autograd accumulates it into .grad(). (Reading .grad() itself
// between backward() and synchronize() would race with the engine, which
// reduces it in place as soon as every rank has submitted it.)
class LocalGradients {
 public:
  explicit LocalGradients(const std::vector<at::Tensor>& params) : values_(params.size()) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].register_hook([this, i](const at::Tensor& g) { values_[i] = g.clone(); });
  }
  const std::vector<at::Tensor>& values() const { return values_; }

 private:
  std::vector<at::Tensor> values_;
};

// The gradients every rank's DistributedOptimizer produces (after
// synchronize()) when rank r's loss is over its slice of the step-0 batch.
std::vector<at::Tensor> reduced_gradients(int n, cohort::DistributedOptimizerOptions options,
                                          std::vector<std::vector<at::Tensor>>* local = nullptr) {
  PerRank<std::vector<at::Tensor>> grads(n), locals(n);
  run_torch_ranks(n, [&](int rank, int size) {
    nn::Sequential net = make_initialised_net();
    auto opt = make_optimizer(OptimizerKind::sgd, net);
    cohort::DistributedOptimizer dist(*opt, net->named_parameters(), options);
    const LocalGradients mine(net->parameters());
    auto [x, y] = global_batch(0);
    const int64_t per = kGlobalBatch / size;
    // Scaled inputs make gradients span several binades (a harder case for
    // 16-bit floats than values near 1).
    torch::mse_loss(net->forward(x.narrow(0, rank * per, per) * (rank + 1)), y.narrow(0, rank * per, per)).backward();
    dist.synchronize();
    locals.add(rank, mine.values());
    std::vector<at::Tensor> g;
    for (const auto& p : net->parameters()) g.push_back(p.grad().clone());
    grads.add(rank, g);
  });
  for (int r = 1; r < n; ++r) COHORT_CHECK(bitwise_equal(grads.of(r)[0], grads.of(0)[0])) << "rank " << r;
  if (local)
    for (int r = 0; r < n; ++r) local->push_back(locals.of(r)[0]);
  return grads.of(0)[0];
}

TEST(DistributedOptimizer, CompressionStaysWithinItsRoundingError) {
  const int n = 2;
  std::vector<std::vector<at::Tensor>> local;
  const std::vector<at::Tensor> exact = reduced_gradients(n, {}, &local);
  struct Case {
    cohort::Compression c;
    double unit;  // unit roundoff of the 16-bit format
  };
  for (const Case& c : {Case{cohort::Compression::fp16, std::ldexp(1.0, -11)}, Case{cohort::Compression::bf16, std::ldexp(1.0, -8)}}) {
    const std::vector<at::Tensor> got = reduced_gradients(n, {.compression = c.c});
    bool any_difference = false;
    for (size_t i = 0; i < exact.size(); ++i) {
      // Each input is rounded once (relative u), the float32 sum is exact
      // enough, and the average is rounded once more: |err| <= u * mean|g_r|
      // + u * |avg| (+ the smallest fp16 subnormal for tiny values).
      at::Tensor mean_abs = at::zeros_like(exact[i]);
      for (int r = 0; r < n; ++r) mean_abs += local[size_t(r)][i].abs() / n;
      const at::Tensor bound = c.unit * (mean_abs + exact[i].abs()) * 1.01 + 6e-8;
      const at::Tensor err = (got[i] - exact[i]).abs();
      EXPECT_TRUE((err <= bound).all().item<bool>())
          << cohort::compression_name(c.c) << " parameter " << i << ": worst excess "
          << (err - bound).max().item<double>();
      any_difference = any_difference || !at::equal(got[i], exact[i]);
      EXPECT_EQ(got[i].scalar_type(), at::kFloat) << "gradients keep the parameter dtype";
    }
    EXPECT_TRUE(any_difference) << cohort::compression_name(c.c) << " changed nothing: was it applied?";
  }
}

TEST(DistributedOptimizer, SumAndPredivideFactor) {
  const int n = 4;
  std::vector<std::vector<at::Tensor>> local;
  const std::vector<at::Tensor> avg = reduced_gradients(n, {}, &local);
  const std::vector<at::Tensor> sum = reduced_gradients(n, {.op = ReduceOp::sum});
  const std::vector<at::Tensor> predivided = reduced_gradients(n, {.gradient_predivide_factor = 8.0});
  for (size_t i = 0; i < avg.size(); ++i) {
    at::Tensor want_sum = at::zeros_like(avg[i]);
    for (int r = 0; r < n; ++r) want_sum += local[size_t(r)][i];
    EXPECT_TRUE(at::allclose(sum[i], want_sum, 1e-5, 1e-7)) << "sum, parameter " << i;
    EXPECT_TRUE(at::allclose(avg[i], want_sum / n, 1e-5, 1e-7)) << "avg, parameter " << i;
    EXPECT_TRUE(at::allclose(predivided[i], avg[i], 1e-5, 1e-7)) << "predivided, parameter " << i;
  }
}

// Two heads; rank 1 never uses head b, and nobody uses head c.
struct TwoHeads : nn::Module {
  TwoHeads() {
    trunk = register_module("trunk", nn::Linear(4, 4));
    a = register_module("a", nn::Linear(4, 2));
    b = register_module("b", nn::Linear(4, 2));
    c = register_module("c", nn::Linear(4, 2));
  }
  nn::Linear trunk{nullptr}, a{nullptr}, b{nullptr}, c{nullptr};
};

TEST(DistributedOptimizer, ParametersWithoutGradientsDoNotHangAnyRank) {
  const int n = 2;
  PerRank<std::vector<at::Tensor>> grads(n), local_b(n);
  run_torch_ranks(n, [&](int rank, int) {
    auto net = std::make_shared<TwoHeads>();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.fill_(0.25);
    }
    torch::optim::SGD opt(net->parameters(), 0.1);
    cohort::DistributedOptimizer dist(opt, net->named_parameters());
    const LocalGradients mine({net->b->weight});
    for (int step = 0; step < 3; ++step) {
      dist.zero_grad();
      const at::Tensor x = at::full({3, 4}, double(rank + 1 + step));
      const at::Tensor h = net->trunk->forward(x).tanh();
      at::Tensor loss = net->a->forward(h).pow(2).sum();
      if (rank == 0) loss = loss + net->b->forward(h).pow(2).sum();
      loss.backward();
      dist.synchronize();
      if (rank == 0) local_b.add(rank, {mine.values()[0]});
      grads.add(rank, {net->b->weight.grad().clone(), net->c->weight.grad().clone()});
      dist.step();
    }
  });
  for (int step = 0; step < 3; ++step) {
    const auto& g0 = grads.of(0)[size_t(step)];
    EXPECT_TRUE(bitwise_equal(g0, grads.of(1)[size_t(step)])) << "step " << step;
    // Rank 1 contributed zeros for head b: the average is half of rank 0's.
    EXPECT_TRUE(at::allclose(g0[0], local_b.of(0)[size_t(step)][0] / 2)) << "step " << step;
    EXPECT_TRUE(at::equal(g0[1], at::zeros_like(g0[1]))) << "unused everywhere: zero gradient";
  }
}

TEST(DistributedOptimizer, RejectsBadConfiguration) {
  run_torch_ranks(1, [&](int, int) {
    nn::Sequential net = make_initialised_net();
    auto opt = make_optimizer(OptimizerKind::sgd, net);
    auto error_of = [&](cohort::DistributedOptimizerOptions o,
                        const torch::OrderedDict<std::string, at::Tensor>& named) -> std::string {
      try {
        cohort::DistributedOptimizer dist(*opt, named, o);
      } catch (const ConfigError& e) {
        return e.what();
      }
      return "no error";
    };
    const auto named = net->named_parameters();
    auto expect = [](const std::string& got, const std::string& want) {
      COHORT_CHECK(got.find(want) != std::string::npos) << "want '" << want << "' in '" << got << "'";
    };
    expect(error_of({.op = ReduceOp::max}, named), "op must be avg or sum");
    expect(error_of({.backward_passes_per_step = 0}, named), "backward_passes_per_step must be at least 1");
    expect(error_of({.op = ReduceOp::sum, .gradient_predivide_factor = 2}, named), "applies to op avg only");
    torch::OrderedDict<std::string, at::Tensor> partial;
    partial.insert("only", named.values()[0]);
    expect(error_of({}, partial), "parameter 1 of param group 0 (shape [12]) is not among the named parameters");
  });
}


// ---- replica agreement (issue 12, item 8) ----

std::vector<std::string> mismatch_errors_of(const std::function<void(int rank)>& fn) {
  return run_torch_ranks_errors<MismatchError>(2, fn);
}

void train_step(cohort::DistributedOptimizer& dist, nn::Sequential& net, int step) {
  auto [x, y] = global_batch(step);
  dist.zero_grad();
  torch::mse_loss(net->forward(x), y).backward();
  dist.step();
}

// A forgotten broadcast_parameters: rank 1 starts from other weights in one
// parameter ("2.bias"). Horovod would average the gradients and train on;
// the first step's check fails on both ranks, naming it.
TEST(ReplicaAgreement, MissedBroadcastIsReportedAtTheFirstStep) {
  for (bool broadcast : {false, true}) {
    const auto errors = mismatch_errors_of([&](int rank) {
      nn::Sequential net = make_initialised_net();
      if (rank == 1) {
        torch::NoGradGuard no_grad;
        net->named_parameters()["2.bias"].add_(0.5);
      }
      torch::optim::SGD sgd(net->parameters(), 0.1);
      if (broadcast) cohort::broadcast_parameters(*net, 0);
      cohort::DistributedOptimizer dist(sgd, net->named_parameters());
      for (int s = 0; s < 3; ++s) train_step(dist, net, s);
    });
    for (int r = 0; r < 2; ++r) {
      const std::string& e = errors[size_t(r)];
      if (broadcast) {
        EXPECT_EQ(e, "") << "rank " << r;
        continue;
      }
      EXPECT_NE(e.find("parameters differ at step 1: '2.bias' on rank 1 differs from rank 0's"), std::string::npos)
          << "rank " << r << ": " << e;
      EXPECT_NE(e.find("broadcast_parameters"), std::string::npos) << e;
    }
  }
}

// Divergence after the start (a rank editing its weights outside the
// optimizer) is found at the next periodic check, not before.
TEST(ReplicaAgreement, DivergenceIsFoundAtTheNextPeriodicCheck) {
  std::vector<int> steps_done(2, 0);
  const auto errors = mismatch_errors_of([&](int rank) {
    nn::Sequential net = make_initialised_net();
    torch::optim::SGD sgd(net->parameters(), 0.1);
    cohort::DistributedOptimizer dist(sgd, net->named_parameters(), {.agreement_check_steps = 4});
    for (int s = 1; s <= 8; ++s) {
      if (s == 2 && rank == 1) {
        torch::NoGradGuard no_grad;
        net->named_parameters()["0.weight"].mul_(1.0001);
      }
      train_step(dist, net, s);
      steps_done[size_t(rank)] = s;
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("differ at step 4: '0.weight' on rank 1"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
    EXPECT_EQ(steps_done[size_t(r)], 3) << "rank " << r;
  }
}

// One rank runs a step fewer: the other's last step has no partner. It must
// not hang or fail with a bare shutdown message: a MismatchError names both
// ranks and the step and points to join().
TEST(ReplicaAgreement, UnevenStepCountNamesTheRanks) {
  const auto errors = mismatch_errors_of([&](int rank) {
    nn::Sequential net = make_initialised_net();
    torch::optim::SGD sgd(net->parameters(), 0.1);
    cohort::DistributedOptimizer dist(sgd, net->named_parameters());
    for (int s = 0; s < (rank == 0 ? 3 : 2); ++s) train_step(dist, net, s);
  });  // rank 1 returns after 2 steps: its engine shuts down
  EXPECT_NE(errors[0].find("DistributedOptimizer: rank 0 is in step 3 but rank 1 shut down before it"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("cohort::join()"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace cohort::testing::distributed_optimizer_test
