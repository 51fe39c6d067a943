// ZeRO stages 1, 2 and 3 (data_parallel/zero_optimizer.h, strategy/zero.h),
// ranks as threads, against independent references:
// - stage 3 holds its blocks only, two units' full parameters at most
//   during a step, the whole model for predict();
// - every stage trains as one process on the global batch, step by step
//   (float64, SGD with momentum and Adam, 1-4 ranks, uneven row shares and
//   uneven blocks: the parameter count does not divide by the ranks, and
//   small buckets split it several ways);
// - the memory counters: parameters whole, optimizer state for this rank's
//   blocks only (the blocks of all ranks add up to the model), gradients
//   whole (stage 1) or this rank's blocks (stage 2);
// - the per-rank estimate against the ZeRO paper's Table 1;
// - a checkpoint saved by zero at 4 ranks resumes exactly at 2 and 3 ranks,
//   under DDP and on one device, and one device's under zero; so does a
//   sharded one (each rank its own blocks), and its consolidated export,
//   written a bucket at a time; damaged sharded checkpoints are refused;
// - bfloat16 parameters with float32 master blocks stay close to float64;
// - hybrid sharding (blocks over one mesh axis, replicas over the other)
//   equals one process at every stage;
// - refusals: an optimizer whose state is not per element, named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cohort/common/check.h"
#include "cohort/common/error.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/element_state.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data_parallel/sharded_unit.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/strategy/make_strategy.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "cohort/torch/strategy/zero.h"
#include "tests/launcher/cohortrun_process.h"  // TempDir
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::zero_test {
namespace {

using launcher::testing::TempDir;

namespace nn = torch::nn;

// 5*7 + 7 + 7*3 + 3 = 66 parameters: uneven over 4 ranks.
nn::Sequential make_model() {
  nn::Sequential net(nn::Linear(5, 7), nn::Tanh(), nn::Linear(7, 3));
  net->to(torch::kFloat64);
  return net;
}

// `make()`'s initial parameters for `seed`, drawn atomically (rank threads
// share LibTorch's generator).
std::vector<at::Tensor> initial(uint64_t seed, nn::Sequential (*make)() = &make_model) {
  return seeded(seed, [make] {
    std::vector<at::Tensor> out;
    for (const auto& p : make()->parameters()) out.push_back(p.detach().clone());
    return out;
  });
}

// `make()`'s network holding `init`.
nn::Sequential model_with(const std::vector<at::Tensor>& init, nn::Sequential (*make)() = &make_model) {
  nn::Sequential net = make();
  torch::NoGradGuard no_grad;
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
  return net;
}

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); }

OptimizerFactory optimizer_named(const std::string& name) {
  if (name == "adam") return optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(0.05));
  return optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
}

at::Tensor flat(nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().reshape(-1));
  return torch::cat(parts);
}

constexpr int kSteps = 3;
constexpr int64_t kGlobalRows = 10;

std::pair<at::Tensor, at::Tensor> batch(int step) {
  auto g = at::detail::createCPUGenerator(100 + uint64_t(step));
  return {at::randn({kGlobalRows, 5}, g, torch::kFloat64), at::randn({kGlobalRows, 3}, g, torch::kFloat64)};
}

// One process on the global batch: the reference, parameters after each step.
std::vector<at::Tensor> reference_run(const std::vector<at::Tensor>& init, const std::string& optimizer) {
  torch::set_num_threads(1);
  OneDeviceStrategy one;
  one.prepare(training_model(model_with(init), loss_of, optimizer_named(optimizer)));
  std::vector<at::Tensor> out;
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s);
    one.train_step({x, y}, kGlobalRows);
    out.push_back(flat(one.module()));
  }
  return out;
}

// This rank's rows of a global batch of 10: 3, 3, 2, 2 at 4 ranks.
Batch rows_of(const std::pair<at::Tensor, at::Tensor>& global, int rank, int size) {
  const RowBlock b = reduce_scatter_block(kGlobalRows, size, rank);
  return {global.first.narrow(0, b.offset, b.rows), global.second.narrow(0, b.offset, b.rows)};
}

struct Case {
  int stage;
  std::string optimizer;
  int ranks;
};

class ZeroSteps : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroSteps, EqualsOneProcessOnTheGlobalBatchStepByStep) {
  const Case c = GetParam();
  const auto init = initial(7);
  const auto expected = reference_run(init, c.optimizer);
  run_torch_ranks(c.ranks, [&](int rank, int size) {
    // 200 bytes: buckets of at most 25 doubles (or one larger parameter):
    // the 66 elements split 3 ways, 24, 7 and 35. Stage 3: a unit per Linear.
    ZeroStrategy zero({.stage = c.stage, .bucket_bytes = 200, .unit_bytes = 8, .engine = &current_engine()});
    zero.prepare(training_model(model_with(init), loss_of, optimizer_named(c.optimizer)));
    COHORT_CHECK_EQ(zero.sharded().buckets(), c.stage == 3 ? 2 : 3);
    // Padded buckets (stages 1, 2: 24, 7, 35 elements; stage 3: the two
    // Linears, 42 and 24), the step's collectives in the paper's accounting:
    // 2 Psi, and 3 Psi less the last unit (still gathered from forward when
    // backward starts) at stage 3.
    const auto padded = [size](int64_t n) { return (n + size - 1) / size * size; };
    const int64_t psi = c.stage == 3 ? padded(42) + padded(24) : padded(24) + padded(7) + padded(35);
    const int64_t want = c.stage == 3 ? 3 * psi - padded(24) : 2 * psi;
    for (int s = 0; s < kSteps; ++s) {
      zero.train_step(rows_of(batch(s), rank, size), kGlobalRows);
      COHORT_CHECK_EQ(zero.sharded().communicated(), want) << "elements communicated, stage " << c.stage;
      zero.gather_parameters();  // stage 3 holds only its blocks between steps
      const at::Tensor got = flat(zero.module());
      COHORT_CHECK(torch::allclose(got, expected[size_t(s)], 1e-10, 1e-12))
          << "stage " << c.stage << " " << c.optimizer << " rank " << rank << "/" << size << " step " << s
          << ": max difference " << (got - expected[size_t(s)]).abs().max().item<double>();
    }
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage : {1, 2, 3})
    for (const char* optimizer : {"sgd", "adam"})
      for (int ranks : {1, 2, 3, 4}) out.push_back({stage, optimizer, ranks});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroSteps, ::testing::ValuesIn(cases()), [](const auto& info) {
  return "stage" + std::to_string(info.param.stage) + "_" + info.param.optimizer + "_" +
         std::to_string(info.param.ranks) + "ranks";
});

TEST(Zero, MemoryCountersHoldOnlyThisRanksBlocks) {
  const auto init = initial(7);
  constexpr int kRanks = 4;
  for (int stage : {1, 2}) {
    PerRank<ZeroMemory> memory(kRanks);
    PerRank<int64_t> owned(kRanks);
    run_torch_ranks(kRanks, [&](int rank, int size) {
      ZeroStrategy zero({.stage = stage, .bucket_bytes = 200, .engine = &current_engine()});
      zero.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
      zero.train_step(rows_of(batch(0), rank, size), kGlobalRows);
      memory.add(rank, zero.memory());
      owned.add(rank, zero.sharded().owned_numel());
    });
    const int64_t psi = 66, b = 8;  // float64
    int64_t all_owned = 0, all_optimizer = 0;
    for (int r = 0; r < kRanks; ++r) {
      const ZeroMemory m = memory.of(r)[0];
      const int64_t mine = owned.of(r)[0];
      all_owned += mine;
      all_optimizer += m.optimizer;
      EXPECT_GE(m.parameters, psi * b) << "stage " << stage << " rank " << r;
      EXPECT_LT(m.parameters, (psi + 3 * kRanks) * b) << "stage " << stage << " rank " << r;
      EXPECT_EQ(m.optimizer, 2 * mine * b) << "Adam's two moments of this rank's blocks, stage " << stage;
      EXPECT_EQ(m.gradients, stage == 1 ? m.parameters : mine * b) << "stage " << stage << " rank " << r;
      // Stage 2's two packing buffers, each of the largest padded bucket:
      // the buckets (200 bytes: 25 doubles, packed from the last parameter
      // back) hold 24, 7 and 35 elements (a parameter above the cap is a
      // bucket of its own), padded to 24, 8 and 36 at 4 ranks.
      EXPECT_EQ(m.buffers, stage == 1 ? 0 : 2 * 36 * b) << "stage " << stage << " rank " << r;
      // Against the estimate (K = 16 bytes of Adam state per element): equal
      // up to the padding, fewer than `ranks` elements per bucket, each
      // counted at most as a parameter, a gradient and optimizer state.
      const double estimate = zero_bytes_per_rank(double(psi), double(b), 16.0, stage, kRanks);
      const double counted = double(m.parameters + m.gradients + m.optimizer);
      EXPECT_NEAR(counted, estimate, 3 * kRanks * (b + b + 16)) << "stage " << stage << " rank " << r;
    }
    // The blocks cover the model and at most size - 1 elements of padding
    // per bucket.
    EXPECT_GE(all_owned, psi);
    EXPECT_LT(all_owned, psi + 3 * kRanks);
    EXPECT_EQ(all_optimizer, 2 * all_owned * b);
  }
}

// Four Linear layers, a unit each at stage 3 (unit_bytes 8).
nn::Sequential make_deep_model() {
  nn::Sequential net(nn::Linear(5, 8), nn::Tanh(), nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 8), nn::Tanh(),
                     nn::Linear(8, 3));
  net->to(torch::kFloat64);
  return net;
}

// Stage 3 holds only its blocks between steps; during a step at most two
// units' full parameters exist at once (the one computing and the one
// gathered for next); predict() gathers the whole model once, and its
// outputs are one process's.
TEST(Zero, Stage3HoldsAUnitsFullParametersOnlyWhileItIsUsed) {
  const auto init = initial(11, &make_deep_model);
  auto deep_with = [&] { return model_with(init, &make_deep_model); };
  OneDeviceStrategy one;
  one.prepare(training_model(deep_with(), loss_of, optimizer_named("adam")));
  one.train_step({batch(0).first, batch(0).second}, kGlobalRows);
  const at::Tensor x = batch(1).first;
  const at::Tensor expected = one.predict(x);
  run_torch_ranks(2, [&](int rank, int size) {
    ZeroStrategy zero({.stage = 3, .unit_bytes = 8, .engine = &current_engine()});
    zero.prepare(training_model(deep_with(), loss_of, optimizer_named("adam")));
    const ZeroOptimizer& sharded = zero.sharded();
    COHORT_CHECK_EQ(sharded.units(), 4);
    const int64_t blocks_bytes = sharded.owned_numel() * 8;
    COHORT_CHECK_EQ(zero.memory().parameters, blocks_bytes) << "before the first step";
    zero.train_step(rows_of(batch(0), rank, size), kGlobalRows);
    COHORT_CHECK_EQ(sharded.peak_unit_buffers(), 2) << "unit-sized buffers (parameters, gradients) at once";
    COHORT_CHECK_EQ(zero.memory().buffers, 0) << "no packing buffer kept between steps";
    COHORT_CHECK_EQ(zero.memory().parameters, blocks_bytes) << "after the step";
    COHORT_CHECK_EQ(zero.memory().gradients, blocks_bytes) << "this rank's averaged gradient blocks";
    const at::Tensor got = zero.predict(x);
    COHORT_CHECK(torch::allclose(got, expected, 1e-10, 1e-12))
        << "rank " << rank << ": predict differs by " << (got - expected).abs().max().item<double>();
    COHORT_CHECK_GT(zero.memory().parameters, blocks_bytes) << "predict() holds the whole model";
    zero.train_step(rows_of(batch(1), rank, size), kGlobalRows);
    COHORT_CHECK_EQ(zero.memory().parameters, blocks_bytes) << "the next step frees it again";
  });
}

// A model of the program's own, its blocks marked as stage 3's units: an
// embedding and a head outside them (the root unit), three blocks wrapped
// in ShardedUnit.
// A block with a parameter its forward never uses (no gradient reaches it).
struct WithUnusedImpl : nn::Module {
  WithUnusedImpl() : fc(register_module("fc", nn::Linear(8, 8))) {
    unused = register_parameter("unused", torch::ones({5}));
  }
  at::Tensor forward(const at::Tensor& x) { return torch::tanh(fc(x)); }
  nn::Linear fc;
  at::Tensor unused;
};
TORCH_MODULE(WithUnused);

struct WrappedNetImpl : nn::Module {
  // `calls_of_block1`: how often forward calls the second block; `unused`:
  // the last block has a parameter forward never uses.
  explicit WrappedNetImpl(int calls_of_block1 = 1, bool unused = false) : calls(calls_of_block1) {
    embed = register_module("embed", nn::Linear(5, 8));
    for (int i = 0; i < 3; ++i) {
      const std::string name = "block" + std::to_string(i);
      blocks.push_back(i == 2 && unused ? register_module(name, ShardedUnit(WithUnused()))
                                        : register_module(name, ShardedUnit(nn::Sequential(nn::Linear(8, 8),
                                                                                           nn::Tanh()))));
    }
    head = register_module("head", nn::Linear(8, 3));
    to(torch::kFloat64);
  }
  at::Tensor forward(at::Tensor x) {
    x = embed(x);
    for (size_t i = 0; i < blocks.size(); ++i)
      for (int k = 0; k < (i == 1 ? calls : 1); ++k) x = blocks[i](x);
    return head(x);
  }
  int calls;
  nn::Linear embed{nullptr}, head{nullptr};
  std::vector<ShardedUnit> blocks;
};
TORCH_MODULE(WrappedNet);

std::vector<at::Tensor> wrapped_initial(bool unused = false) {
  return seeded(13, [unused] {
    std::vector<at::Tensor> out;
    for (const auto& p : WrappedNet(1, unused)->parameters()) out.push_back(p.detach().clone());
    return out;
  });
}

WrappedNet wrapped_with(const std::vector<at::Tensor>& init, int calls_of_block1 = 1, bool unused = false) {
  WrappedNet net(calls_of_block1, unused);
  torch::NoGradGuard no_grad;
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
  return net;
}

// Stage 3 over ShardedUnits trains as one process on the global batch (the
// units inactive there), at 2 and 3 ranks, including a step in which one
// rank has no rows (it walks the units' collectives alone); at most the
// root, the unit computing and the next one's buffers exist at once.
TEST(Zero, Stage3OverShardedUnitsOfAModelOfOnesOwnEqualsOneProcess) {
  for (bool unused : {false, true}) {
  const auto init = wrapped_initial(unused);
  // Step 1's rows: all on the first two ranks (a third rank has none).
  auto split = [](int step, int rank, int size) -> Batch {
    const auto global = batch(step);
    if (step == 0) return rows_of(global, rank, size);
    const int64_t first = rank == 0 ? 0 : 5, rows = rank < 2 ? 5 : 0;
    return {global.first.narrow(0, first, rows), global.second.narrow(0, first, rows)};
  };
  OneDeviceStrategy one;
  one.prepare(training_model(wrapped_with(init, 1, unused), loss_of, optimizer_named("adam")));
  std::vector<at::Tensor> expected;
  for (int s = 0; s < 2; ++s) {
    one.train_step({batch(s).first, batch(s).second}, kGlobalRows);
    expected.push_back(flat(one.module()));
  }
  for (int ranks : {2, 3})
    run_torch_ranks(ranks, [&](int rank, int size) {
      ZeroStrategy zero({.stage = 3, .engine = &current_engine()});
      zero.prepare(training_model(wrapped_with(init, 1, unused), loss_of, optimizer_named("adam")));
      COHORT_CHECK_EQ(zero.sharded().units(), 4) << "the root and three blocks";
      for (int s = 0; s < 2; ++s) {
        zero.train_step(split(s, rank, size), kGlobalRows);
        COHORT_CHECK_EQ(zero.sharded().peak_unit_buffers(), 3) << "the root, the unit computing, the next one";
        zero.gather_parameters();
        const at::Tensor got = flat(zero.module());
        COHORT_CHECK(torch::allclose(got, expected[size_t(s)], 1e-10, 1e-12))
            << (unused ? "(a block with an unused parameter) " : "") << "rank " << rank << "/" << size << " step "
            << s << ": max difference " << (got - expected[size_t(s)]).abs().max().item<double>();
      }
    });
  }
  const auto init = wrapped_initial();
  // A unit called twice in one forward is refused, naming it.
  const auto twice = run_torch_ranks_errors<ConfigError>(2, [&](int rank) {
    ZeroStrategy zero({.stage = 3, .engine = &current_engine()});
    zero.prepare(training_model(wrapped_with(init, 2), loss_of, optimizer_named("adam")));
    zero.train_step(rows_of(batch(0), rank, 2), kGlobalRows);
  });
  for (const std::string& e : twice)
    EXPECT_NE(e.find("ShardedUnit 2 was called when unit 3's turn had come"), std::string::npos) << e;
}

// Hybrid sharding at 4 ranks as a 2 x 2 mesh: blocks split over the tp
// axis (the shard group), the group's averages averaged again over the dp
// axis (the replicas). Every rank trains as one process on the global batch,
// at each stage.
TEST(Zero, HybridShardingEqualsOneProcess) {
  const auto init = initial(7);
  const TempDir hybrid_dir("cohort_zero_hybrid");
  const auto expected = reference_run(init, "adam");
  for (int stage : {1, 2, 3}) {
    run_world_ranks(4, [&](WorldRank& w) {
      cohort::Mesh mesh({.dp = 2, .pp = 1, .tp = 2}, w.world, w.store, {.engine = engine_test_options()});
      nn::Sequential net = model_with(init);
      std::vector<at::Tensor> params = net->parameters();
      ZeroOptions options{.stage = stage, .bucket_bytes = 200, .engine = &mesh.engine(MeshAxis::tp),
                          .replica_engine = &mesh.engine(MeshAxis::dp)};
      if (stage == 3) options.units = {{0, 1}, {2, 3}};  // a unit per Linear
      ZeroOptimizer zero(params, optimizer_named("adam"), options);
      for (int s = 0; s < kSteps; ++s) {
        zero.zero_grad();
        const Batch mine = rows_of(batch(s), w.rank, 4);  // 10 rows: 3, 3, 2, 2 weighted as multi_worker
        at::Tensor x = mine.input;
        for (int u = 0; u < 2; ++u) {
          if (stage == 3) zero.gather(u);
          x = u == 0 ? torch::tanh(net[0]->as<nn::Linear>()->forward(x)) : net[2]->as<nn::Linear>()->forward(x);
          if (stage == 3 && u == 0) {
            zero.release(0);
            x.register_hook([&zero](const at::Tensor& g) {
              zero.gather(0);
              return g;
            });
          }
        }
        (loss_of(x, mine.target) * (double(mine.rows()) * 4 / double(kGlobalRows))).backward();
        zero.step();
        if (stage == 3) zero.gather_all();
        const at::Tensor got = flat(*net);
        COHORT_CHECK(torch::allclose(got, expected[size_t(s)], 1e-10, 1e-12))
            << "hybrid stage " << stage << " rank " << w.rank << " step " << s << ": max difference "
            << (got - expected[size_t(s)]).abs().max().item<double>();
        if (stage == 3) zero.release_all();
      }
      // Sharded checkpoint of the hybrid job: the replica groups hold the
      // same blocks, so the first (dp coordinate 0) writes them; every
      // parameter then reads back whole, its pieces neither missing nor
      // written twice.
      if (stage == 1) return;
      engine::Engine world(w.world, std::make_shared<rendezvous::PrefixStore>("checkpoint/", w.store),
                           engine_test_options());
      std::vector<std::string> names;
      for (const auto& item : net->named_parameters()) names.push_back(item.key());
      const std::string dir = hybrid_dir / ("stage" + std::to_string(stage));
      save_sharded(dir, [&](ShardWriter& out) {
        if (mesh.rank(MeshAxis::dp) == 0) zero.write_shard(out, names);
      }, {.engine = &world});
      if (stage == 3) zero.gather_all();
      const ShardedCheckpoint saved(dir);
      for (size_t i = 0; i < names.size(); ++i)
        COHORT_CHECK(torch::equal(saved.read(parameter_record(names[i])), params[i].detach()))
            << "hybrid stage " << stage << ": " << names[i] << " saved differs";
      if (stage == 3) zero.release_all();
    });
  }
}

// bfloat16 parameters, compute and communication, with float32 master
// blocks (ZeroOptions::master_dtype's default for half precision): after
// three SGD steps at 2 ranks, every stage stays within 5e-3 of the float64
// run (measured 2026-12-04: 1.4e-3 at every stage, about two bfloat16
// units at these magnitudes; bfloat16 keeps 8 bits of mantissa, a
// relative 3.9e-3).
TEST(Zero, Bfloat16WithFloat32MasterBlocksStaysCloseToFloat64) {
  const auto init = initial(7);
  const auto expected = reference_run(init, "sgd");
  for (int stage : {1, 2, 3}) {
    PerRank<double> error(2);
    run_torch_ranks(2, [&](int rank, int size) {
      nn::Sequential net = model_with(init);
      net->to(torch::kBFloat16);
      ZeroStrategy zero({.stage = stage, .bucket_bytes = 200, .unit_bytes = 8, .engine = &current_engine()});
      // The loss in float32 (LibTorch 1.13 has no bfloat16 mse on CPU).
      const auto loss_f32 = [](const at::Tensor& out, const at::Tensor& y) {
        return torch::mse_loss(out.to(torch::kFloat), y.to(torch::kFloat));
      };
      zero.prepare(training_model(net, loss_f32, optimizer_named("sgd")));
      COHORT_CHECK(zero.optimizer().param_groups()[0].params()[0].scalar_type() == at::kFloat)
          << "the optimizer steps float32 master blocks";
      for (int s = 0; s < kSteps; ++s) {
        const Batch mine = rows_of(batch(s), rank, size);
        zero.train_step({mine.input.to(torch::kBFloat16), mine.target.to(torch::kBFloat16)}, kGlobalRows);
      }
      zero.gather_parameters();
      error.add(rank, (flat(zero.module()).to(torch::kFloat64) - expected.back()).abs().max().item<double>());
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_LT(error.of(r)[0], 5e-3) << "stage " << stage << " rank " << r;
      std::printf("bf16 with float32 masters, stage %d rank %d: max |parameter - float64| = %.2e\n", stage, r,
                  error.of(r)[0]);
    }
  }
}

// The ZeRO paper's Table 1 (Rajbhandari et al. 2020, arXiv:1910.02054):
// per-device model-state memory in GB (1e9 bytes) with mixed-precision Adam
// (2 bytes per parameter and gradient, K = 12), for 7.5B, 128B and 1T
// parameters; the columns P_os, P_os+g, P_os+g+p are stages 1, 2, 3. The
// table prints 3-4 significant digits, some rounded and some cut: within
// one unit of the last digit shown.
TEST(Zero, EstimateEqualsTheZeroPapersTable1) {
  struct Row {
    int n;
    double gb[9];   // 7.5B x3, 128B x3, 1T x3
    double unit[9]; // the last digit's unit
  };
  const std::vector<Row> rows = {
      {1, {120, 120, 120, 2048, 2048, 2048, 16000, 16000, 16000}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
      {4, {52.5, 41.3, 30, 896, 704, 512, 7000, 5500, 4000}, {0.1, 0.1, 1, 1, 1, 1, 1, 1, 1}},
      {16, {35.6, 21.6, 7.5, 608, 368, 128, 4750, 2875, 1000}, {0.1, 0.1, 0.1, 1, 1, 1, 1, 1, 1}},
      {64, {31.4, 16.6, 1.88, 536, 284, 32, 4187, 2218, 250}, {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 1}},
      {256, {30.4, 15.4, 0.47, 518, 263, 8, 4046, 2054, 62.5}, {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 0.1}},
      {1024, {30.1, 15.1, 0.12, 513, 257, 2, 4011, 2013, 15.6}, {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 0.1}},
  };
  const double models[3] = {7.5e9, 128e9, 1e12};
  for (const Row& row : rows)
    for (int m = 0; m < 3; ++m)
      for (int stage = 1; stage <= 3; ++stage) {
        const int k = m * 3 + stage - 1;
        const double gb = zero_bytes_per_rank(models[m], 2, 12, stage, row.n) / 1e9;
        EXPECT_NEAR(gb, row.gb[k], row.unit[k]) << "psi " << models[m] << " N " << row.n << " stage " << stage;
      }
  // Plain data parallelism: (2 + 2 + K) Psi whatever N.
  EXPECT_DOUBLE_EQ(zero_bytes_per_rank(7.5e9, 2, 12, 0, 64), 120e9);
}

std::string archive_bytes(Strategy& strategy) {
  torch::serialize::OutputArchive archive;
  strategy.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_bytes(Strategy& strategy, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  strategy.load(archive);
}

// A fresh job of `ranks` ranks built by `make` from other weights loads the
// state after step 0 (`load`), runs steps 1 and 2, and every rank is
// compared with the uninterrupted single-process run.
void expect_resumes_by(const std::function<void(Strategy&)>& load, int ranks,
                       const std::function<std::unique_ptr<Strategy>()>& make, const std::vector<at::Tensor>& expected,
                       const std::string& what) {
  run_torch_ranks(ranks, [&](int rank, int size) {
    std::unique_ptr<Strategy> strategy = make();
    strategy->prepare(training_model(model_with(initial(99)), loss_of, optimizer_named("adam")));
    load(*strategy);
    for (int s = 1; s < kSteps; ++s) {
      strategy->train_step(rows_of(batch(s), rank, size), kGlobalRows);
      if (auto* zero = dynamic_cast<ZeroStrategy*>(strategy.get())) zero->gather_parameters();
      const at::Tensor got = flat(strategy->module());
      COHORT_CHECK(torch::allclose(got, expected[size_t(s)], 1e-10, 1e-12))
          << what << ", rank " << rank << "/" << size << " step " << s << ": max difference "
          << (got - expected[size_t(s)]).abs().max().item<double>();
    }
  });
}

void expect_resumes(const std::string& saved, int ranks, const std::function<std::unique_ptr<Strategy>()>& make,
                    const std::vector<at::Tensor>& expected, const std::string& what) {
  expect_resumes_by([&](Strategy& strategy) { load_bytes(strategy, saved); }, ranks, make, expected, what);
}

std::function<std::unique_ptr<Strategy>()> zero_at(int stage) {
  return [stage] {
    return std::make_unique<ZeroStrategy>(
        ZeroStrategyOptions{.stage = stage, .bucket_bytes = 200, .unit_bytes = 8, .engine = &current_engine()});
  };
}

std::unique_ptr<Strategy> ddp() {
  return std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
}

// Saved by zero at 4 ranks, loaded by zero at 2 and 3 (both stages), by
// multi_worker (DDP) and by one device; and one device's checkpoint loaded
// by zero at 3 ranks: every resumed run continues as the uninterrupted one.
TEST(Zero, CheckpointsLoadAtAnotherWorldSizeAndIntoDdpAndBack) {
  const auto init = initial(7);
  const auto expected = reference_run(init, "adam");
  PerRank<std::string> saved(4);
  run_torch_ranks(4, [&](int rank, int size) {
    ZeroStrategy zero({.stage = 2, .bucket_bytes = 200, .engine = &current_engine()});
    zero.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
    zero.train_step(rows_of(batch(0), rank, size), kGlobalRows);
    saved.add(rank, archive_bytes(zero));
  });
  const std::string from_zero = saved.of(0)[0];
  for (int ranks : {2, 3})
    for (int stage : {1, 2, 3})
      expect_resumes(from_zero, ranks, [stage] {
        return std::make_unique<ZeroStrategy>(
            ZeroStrategyOptions{.stage = stage, .bucket_bytes = 200, .unit_bytes = 8, .engine = &current_engine()});
      }, expected, "zero 4 -> zero stage " + std::to_string(stage) + " at " + std::to_string(ranks));
  expect_resumes(from_zero, 2, [] {
    return std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
  }, expected, "zero 4 -> multi_worker (DDP) at 2");
  expect_resumes(from_zero, 1, [] { return std::make_unique<OneDeviceStrategy>(); }, expected,
                 "zero 4 -> one_device");

  // Saved by stage 3 (its blocks gathered for the save) at 3 ranks, into DDP.
  PerRank<std::string> saved3(3);
  run_torch_ranks(3, [&](int rank, int size) {
    ZeroStrategy zero({.stage = 3, .unit_bytes = 8, .engine = &current_engine()});
    zero.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
    zero.train_step(rows_of(batch(0), rank, size), kGlobalRows);
    saved3.add(rank, archive_bytes(zero));
  });
  expect_resumes(saved3.of(0)[0], 2, [] {
    return std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
  }, expected, "zero stage 3 at 3 -> multi_worker (DDP) at 2");

  OneDeviceStrategy one;
  one.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
  one.train_step({batch(0).first, batch(0).second}, kGlobalRows);
  expect_resumes(archive_bytes(one), 3, [] {
    return std::make_unique<ZeroStrategy>(
        ZeroStrategyOptions{.stage = 1, .bucket_bytes = 200, .engine = &current_engine()});
  }, expected, "one_device -> zero stage 1 at 3");
}

TEST(Zero, RefusesOptimizersWhoseStateIsNotPerElementAndBadSpecs) {
  const auto errors = run_torch_ranks_errors<ConfigError>(2, [](int) {
    ZeroStrategy zero({.engine = &current_engine()});
    zero.prepare(training_model(make_model(), loss_of,
                                optimizer_factory<torch::optim::LBFGS>(torch::optim::LBFGSOptions(1))));
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("torch::optim::LBFGS"), std::string::npos) << e;
  const std::string stage4 = error_of_kind<ConfigError>([] { make_strategy("zero:stage=4"); });
  EXPECT_NE(stage4.find("stage must be one of 1, 2, 3"), std::string::npos) << stage4;
  // Stage 3 steps through a Sequential's layers: another module is refused.
  struct NotSequentialImpl : nn::Module {
    NotSequentialImpl() : fc(register_module("fc", nn::Linear(5, 3))) { fc->to(torch::kFloat64); }
    at::Tensor forward(const at::Tensor& x) { return fc(x); }
    nn::Linear fc;
  };
  const auto not_sequential = run_torch_ranks_errors<ConfigError>(2, [](int) {
    ZeroStrategy zero({.stage = 3, .engine = &current_engine()});
    zero.prepare(training_model(nn::ModuleHolder<NotSequentialImpl>(), loss_of, optimizer_named("sgd")));
  });
  for (const std::string& e : not_sequential) {
    EXPECT_NE(e.find("torch::nn::Sequential"), std::string::npos) << e;
    EXPECT_NE(e.find("has no ShardedUnit"), std::string::npos) << e;
  }
  // Units cannot nest.
  const auto nested = run_torch_ranks_errors<ConfigError>(2, [](int) {
    ZeroStrategy zero({.stage = 3, .engine = &current_engine()});
    auto inner = ShardedUnit(nn::Linear(5, 3));
    auto outer = nn::ModuleHolder<NotSequentialImpl>();
    outer->register_module("unit", ShardedUnit(nn::Sequential(inner)));
    zero.prepare(training_model(outer, loss_of, optimizer_named("sgd")));
  });
  for (const std::string& e : nested) EXPECT_NE(e.find("units cannot nest"), std::string::npos) << e;
}

// Sharded checkpoints (checkpoint/sharded_checkpoint.h): saved by zero at 4
// ranks, each rank writing only its blocks (stage 2: blocks cut across
// parameters; stage 3: units), they resume exactly under zero at 2 and 3
// ranks and every stage, and under DDP and on one device
// (load_sharded_checkpoint, which reads every shard). The consolidated
// export is one shard, written while no rank held more than one bucket's
// state; DDP's own sharded save resumes under zero.
TEST(Zero, ShardedCheckpointsReshardAndLoadIntoDdp) {
  const auto init = initial(7);
  const auto expected = reference_run(init, "adam");
  const TempDir dir("cohort_zero_sharded");
  const TrainingState state{.epoch = 2, .batch = 5, .step = 1, .seed = 0xfeedbeefcafe1234ull};
  for (int stage : {2, 3}) {
    PerRank<int64_t> most(4);
    const std::string saved = dir / ("stage" + std::to_string(stage)), whole = saved + "_consolidated";
    run_torch_ranks(4, [&](int rank, int size) {
      ZeroStrategy zero({.stage = stage, .bucket_bytes = 200, .unit_bytes = 8, .engine = &current_engine()});
      zero.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
      zero.train_step(rows_of(batch(0), rank, size), kGlobalRows);
      zero.save_sharded(saved, state);
      most.add(rank, zero.export_consolidated(whole, state));
    });
    EXPECT_EQ(ShardedCheckpoint(saved).shards(), 4);
    EXPECT_EQ(ShardedCheckpoint(whole).shards(), 1);
    // Adam at stage 2: the largest bucket (35 doubles, padded to 36) with
    // its value and two moments; stage 3: the first unit (42 doubles, 44).
    for (int r = 0; r < 4; ++r) EXPECT_EQ(most.of(r)[0], (stage == 2 ? 36 : 44) * 3 * 8) << "rank " << r;
    const std::string from = " (zero stage " + std::to_string(stage) + " at 4";
    for (int ranks : {2, 3})
      for (int to : {1, 2, 3})
        expect_resumes_by([&](Strategy& s) { EXPECT_EQ(dynamic_cast<ZeroStrategy&>(s).load_sharded(saved), state); },
                          ranks, zero_at(to), expected,
                          "sharded" + from + ") -> zero stage " + std::to_string(to) + " at " + std::to_string(ranks));
    for (const std::string& path : {saved, whole}) {
      // DDP through its ShardedCheckpoints (as fit() resumes), one device
      // through the free function.
      auto into_ddp = [&](Strategy& s) { EXPECT_EQ(s.sharded_checkpoints()->load_sharded(path), state); };
      auto into_one = [&](Strategy& s) {
        EXPECT_EQ(load_sharded_checkpoint(path, s.module(), s.optimizer()), state);
      };
      expect_resumes_by(into_ddp, 2, &ddp, expected, path + from + ") -> multi_worker (DDP) at 2");
      expect_resumes_by(into_one, 1, [] { return std::make_unique<OneDeviceStrategy>(); }, expected,
                        path + from + ") -> one_device");
    }
  }
  // DDP's sharded save (each of 4 ranks writes a quarter of every tensor;
  // the last bias's 3 elements leave one rank none) resumes under zero stage
  // 3 at 2 ranks.
  const std::string from_ddp = dir / "ddp";
  run_torch_ranks(4, [&](int rank, int size) {
    std::unique_ptr<Strategy> multi = ddp();
    multi->prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
    multi->train_step(rows_of(batch(0), rank, size), kGlobalRows);
    save_sharded_checkpoint(from_ddp, multi->module(), multi->optimizer(), state, {.engine = &current_engine()});
  });
  expect_resumes_by([&](Strategy& s) { dynamic_cast<ZeroStrategy&>(s).load_sharded(from_ddp); }, 2, zero_at(3),
                    expected, "sharded (DDP at 4) -> zero stage 3 at 2");
}

// A checkpoint whose parameters do not all have optimizer state (one never
// stepped where it was saved): every rank decides a bucket's state from all
// its members' records, so the ranks whose blocks hold only the stateless
// member agree with the others (the consolidated save's collectives, which
// run per bucket with state, stay in step, and the step counts agree).
TEST(Zero, ShardedStateOfPartlySteppedBucketsIsTheSameOnEveryRank) {
  const auto init = initial(7);
  const TempDir dir("cohort_zero_partial");
  const std::string path = dir / "ck";
  run_torch_ranks(1, [&](int, int) {
    OneDeviceStrategy one;
    one.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
    one.train_step({batch(0).first, batch(0).second}, kGlobalRows);
    // "2.weight" (21 elements) as if never stepped; "2.bias" keeps its state.
    erase_element_state(one.optimizer(), one.module().named_parameters()["2.weight"]);
    save_sharded_checkpoint(path, one.module(), one.optimizer(), {}, {.engine = &current_engine()});
  });
  PerRank<int64_t> steps(3);
  run_torch_ranks(3, [&](int rank, int size) {
    // Bucket 0 holds 2.bias then 2.weight, 24 elements: ranks 1 and 2 own
    // only elements of 2.weight.
    ZeroStrategy zero({.stage = 2, .bucket_bytes = 200, .engine = &current_engine()});
    zero.prepare(training_model(model_with(initial(99)), loss_of, optimizer_named("adam")));
    zero.load_sharded(path);
    const at::Tensor& block = zero.optimizer().param_groups().front().params().front();
    const std::optional<ElementState> state = element_state_of(zero.optimizer(), block);
    steps.add(rank, state ? state->step : -1);
    torch::serialize::OutputArchive archive;
    zero.save(archive);  // collective per bucket with state: hangs if the ranks disagree
    zero.train_step(rows_of(batch(1), rank, size), kGlobalRows);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(steps.of(r)[0], 1) << "rank " << r << "'s step count of bucket 0";
}

// A save replaces the one in force only once every shard is written, and
// keeps the one before; damaged or mismatched checkpoints are ConfigErrors
// that name the file and what is wrong, and change nothing.
TEST(Zero, ShardedCheckpointsRefuseDamageAndMismatch) {
  const auto init = initial(7);
  const TempDir dir("cohort_zero_damage");
  const std::string path = dir / "ck";
  auto save = [&](int steps) {
    run_torch_ranks(2, [&](int rank, int size) {
      ZeroStrategy zero({.stage = 2, .bucket_bytes = 200, .engine = &current_engine()});
      zero.prepare(training_model(model_with(init), loss_of, optimizer_named("adam")));
      for (int s = 0; s < steps; ++s) zero.train_step(rows_of(batch(s), rank, size), kGlobalRows);
      zero.save_sharded(path, {.step = steps});
    });
  };
  save(1);
  save(2);
  save(3);
  // Two saves' shards remain (the one in force and the one before).
  int shard_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path))
    shard_files += entry.path().filename().string().starts_with("shard-");
  EXPECT_EQ(shard_files, 4);

  auto error_loading = [&](const std::function<std::unique_ptr<Strategy>()>& make, OptimizerFactory optimizer,
                           nn::Sequential net) {
    std::string message;
    const at::Tensor before = flat(*net);
    std::unique_ptr<Strategy> s = make();
    s->prepare(training_model(net, loss_of, std::move(optimizer)));
    try {
      load_sharded_checkpoint(path, s->module(), s->optimizer());
    } catch (const ConfigError& e) {
      message = e.what();
    }
    if (!message.empty()) {
      EXPECT_TRUE(torch::equal(flat(s->module()), before)) << "a refused checkpoint changed the model";
    }
    return message;
  };
  auto one = [] { return std::unique_ptr<Strategy>(std::make_unique<OneDeviceStrategy>()); };
  EXPECT_EQ(error_loading(one, optimizer_named("adam"), model_with(init)), "");
  const std::string other = error_loading(one, optimizer_named("sgd"), model_with(init));
  EXPECT_NE(other.find("holds the state of a torch::optim::Adam, this job's optimizer is a torch::optim::SGD"),
            std::string::npos) << other;
  auto wider = [] {
    nn::Sequential net(nn::Linear(5, 8), nn::Tanh(), nn::Linear(8, 3));
    net->to(torch::kFloat64);
    return net;
  };
  const std::string shape = error_loading(one, optimizer_named("adam"), wider());
  EXPECT_NE(shape.find("parameter '0.weight' is [7, 5] there, [8, 5] in this model"), std::string::npos) << shape;

  // A save that fails on one rank (its fill throws before its shard is
  // written) fails on every rank, and the save in force stays the last
  // complete one.
  const at::Tensor before = ShardedCheckpoint(path).read("@training_state");
  const auto failed = run_torch_ranks_errors<Error>(2, [&](int rank) {
    save_sharded(path, [&](ShardWriter& out) {
      out.add("x", {2}, rank, at::ones({1}));
      if (rank == 1) COHORT_THROW(Error) << "disk full on rank 1";
    }, {.engine = &current_engine()});
  });
  EXPECT_NE(failed[1].find("disk full on rank 1"), std::string::npos) << failed[1];
  EXPECT_NE(failed[0].find("another rank could not write its shard"), std::string::npos) << failed[0];
  EXPECT_TRUE(torch::equal(ShardedCheckpoint(path).read("@training_state"), before));
  EXPECT_EQ(before[2].item<int64_t>(), 3) << "the third save's step";
  // A writer that cannot start (its directory is under a regular file)
  // still runs the fill's collectives, so a single-writer save with
  // collectives inside (the consolidated export's) fails cleanly on every
  // rank instead of leaving the other ranks in a collective alone.
  dir.write("a_file", "x");
  const auto unwritable = run_torch_ranks_errors<Error>(2, [&](int rank) {
    save_sharded(dir / "a_file/ck", [&](ShardWriter& out) {
      const at::Tensor sum = allreduce(at::ones({1}), {.op = ReduceOp::sum});
      out.add("sum", {1}, 0, sum);
    }, {.single_writer = true, .engine = &current_engine()});
    (void)rank;
  });
  EXPECT_NE(unwritable[0].find("a_file"), std::string::npos) << unwritable[0];
  EXPECT_NE(unwritable[1].find("another rank could not write its shard"), std::string::npos) << unwritable[1];

  // A flipped byte in rank 1's shard of the save in force: its checksum
  // names it.
  std::ifstream manifest(dir / "ck/manifest", std::ios::binary);
  const std::string listed((std::istreambuf_iterator<char>(manifest)), {});
  std::string victim;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("shard-00001-of-00002") && listed.find(name) != std::string::npos)
      victim = entry.path().string();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  std::string corrupt;
  try {
    ShardedCheckpoint{path};
  } catch (const ConfigError& e) {
    corrupt = e.what();
  }
  EXPECT_NE(corrupt.find(victim), std::string::npos) << corrupt;
  EXPECT_NE(corrupt.find("checksum mismatch"), std::string::npos) << corrupt;
  std::filesystem::resize_file(victim, 20);
  try {
    ShardedCheckpoint{path};
    ADD_FAILURE() << "a truncated shard loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::filesystem::remove(victim);
  try {
    ShardedCheckpoint{path};
    ADD_FAILURE() << "a checkpoint without a shard loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is incomplete: shard shard-00001-of-00002"), std::string::npos)
        << e.what();
  }
  try {
    ShardedCheckpoint{dir / "nothing"};
    ADD_FAILURE() << "an empty directory loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no sharded checkpoint in"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::testing::zero_test
