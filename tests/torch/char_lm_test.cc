// The char_lm model on dp x pp x tp meshes (ranks as threads) against the
// one-rank model evaluated directly in float64 (dense_loss, model.h) on the
// same global batch:
// - one forward/backward: the loss, and every rank's gradient of every
//   parameter shard against the matching slice of the reference gradient,
//   at world size 4 (every factorisation) and 8 (two meshes); the logits of
//   the sampling path (pipeline forward, gathered over tp) against the
//   reference's;
// - a few Adam steps: the loss curve of every world-4 mesh against plain
//   Adam on the reference, so "trains like the single-rank run" is checked
//   step by step;
// - sampling (sampling.h) against closed-form logits.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/torch/data_parallel/zero_optimizer.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "examples/char_lm/batches.h"
#include "examples/char_lm/model.h"
#include "examples/char_lm/parallel_lm.h"
#include "examples/char_lm/sampling.h"
#include "examples/char_lm/vocabulary.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::char_lm_test {
namespace {

namespace lm = cohort::examples::char_lm;
using cohort::MeshAxis;

// Tiny: 30 characters padded to 32, 4 heads (so tp = 4 splits them), 4
// blocks (so pp = 4 gets one each), windows of 8, a global batch of 8.
const lm::ModelShape kShape{.vocab = 32, .d_model = 16, .heads = 4, .layers = 4, .seq_len = 8};
constexpr int64_t kBatch = 8;
constexpr int64_t kRealVocab = 30;
const lm::InitOptions kInit{.seed = 7, .dtype = at::kDouble, .perturb = true};

struct MeshCase {
  int dp, pp, tp;
  cohort::Schedule schedule;
  int micro_batches;
};

std::string name_of(const MeshCase& c) {
  return "dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) + "_tp" + std::to_string(c.tp) + "_" +
         cohort::schedule_name(c.schedule) + "_m" + std::to_string(c.micro_batches);
}

void PrintTo(const MeshCase& c, std::ostream* os) { *os << name_of(c); }

const lm::WindowBatches& batches() {
  static const lm::WindowBatches b = [] {
    // A token stream over the real (unpadded) vocabulary.
    std::vector<int64_t> tokens(500);
    uint64_t x = 12345;
    for (auto& t : tokens) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      t = int64_t((x >> 33) % kRealVocab);
    }
    return lm::WindowBatches(tokens, kShape.seq_len, 3);
  }();
  return b;
}

at::Tensor windows(int64_t step, lm::RowRange rows) {
  return at::tensor(batches().rows(step, rows), at::kLong).reshape({rows.end - rows.begin, kShape.seq_len + 1});
}

struct Reference {
  double loss = 0;
  lm::FullParameters grads;
};

// The one-rank model's loss and gradients on global batch `step`, in float64.
Reference reference_step(const lm::FullParameters& params, int64_t step) {
  lm::FullParameters p;
  for (const auto& [name, t] : params) p[name] = t.detach().clone().requires_grad_(true);
  const at::Tensor w = windows(step, {0, kBatch});
  const int64_t t = kShape.seq_len;
  const at::Tensor loss = lm::dense_loss(p, kShape, w.narrow(1, 0, t), w.narrow(1, 1, t));
  loss.backward();
  Reference r{loss.item<double>(), {}};
  for (const auto& [name, t] : p) r.grads[name] = t.grad().clone();
  return r;
}

// max |a - b| / max |b|: the error relative to the tensor's scale.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

class CharLmMeshTest : public ::testing::TestWithParam<MeshCase> {};

TEST_P(CharLmMeshTest, GradientsAndLogitsMatchTheOneRankModel) {
  const MeshCase c = GetParam();
  const int n = c.dp * c.pp * c.tp;
  const lm::FullParameters full = lm::full_parameters(kShape, kInit);
  const Reference ref = reference_step(full, 0);
  const at::Tensor sample_ids = windows(5, {0, 1}).narrow(1, 0, kShape.seq_len).contiguous();
  const at::Tensor ref_logits = lm::dense_logits(full, kShape, sample_ids);

  PerRank<std::string> failures(n);
  PerRank<std::string> covered(n);
  PerRank<double> losses(n);
  run_world_ranks(n, [&](WorldRank& w) {
    cohort::Mesh mesh({.dp = c.dp, .pp = c.pp, .tp = c.tp}, w.world, w.store, {.engine = engine_test_options()});
    lm::ParallelLm model(mesh, kShape, {.micro_batches = c.micro_batches, .schedule = c.schedule, .init = kInit});
    const at::Tensor loss = model.forward_backward(windows(0, lm::replica_rows(kBatch, c.dp, mesh.rank(MeshAxis::dp))));
    losses.add(w.rank, model.global_loss(loss));

    const cohort::TensorParallelGroup tp = cohort::TensorParallelGroup::of(&mesh.engine(MeshAxis::tp));
    const auto specs = cohort::shard_specs(*model.stage());
    for (const auto& item : model.stage()->named_parameters()) {
      const std::string& name = item.key();
      const at::Tensor& param = item.value();
      covered.add(w.rank, name);
      const auto it = ref.grads.find(name);
      if (it == ref.grads.end()) {
        failures.add(w.rank, "parameter " + name + " is not in the one-rank model");
        continue;
      }
      if (!param.grad().defined()) {
        failures.add(w.rank, "parameter " + name + " has no gradient");
        continue;
      }
      const at::Tensor want = cohort::shard_of(it->second, specs.at(name), tp, name);
      if (want.sizes() != param.grad().sizes()) {
        failures.add(w.rank, "gradient of " + name + " has the wrong shape");
        continue;
      }
      const double err = relative_error(param.grad(), want);
      if (!(err < 1e-9)) failures.add(w.rank, "gradient of " + name + " off by " + std::to_string(err));
    }
    const at::Tensor logits = model.logits(sample_ids);
    if (logits.sizes() != ref_logits.sizes())
      failures.add(w.rank, "sampling logits have the wrong shape");
    else if (!(relative_error(logits, ref_logits) < 1e-9))
      failures.add(w.rank, "sampling logits off by " + std::to_string(relative_error(logits, ref_logits)));
  });

  std::set<std::string> all_covered;
  for (int r = 0; r < n; ++r) {
    for (const auto& f : failures.of(r)) ADD_FAILURE() << "rank " << r << ": " << f;
    ASSERT_EQ(losses.of(r).size(), 1u);
    EXPECT_NEAR(losses.of(r)[0], ref.loss, 1e-10 * ref.loss) << "rank " << r;
    all_covered.insert(covered.of(r).begin(), covered.of(r).end());
  }
  // Every parameter of the one-rank model lives on some rank.
  std::set<std::string> all_ref;
  for (const auto& [name, t] : ref.grads) all_ref.insert(name);
  EXPECT_EQ(all_covered, all_ref);
}

INSTANTIATE_TEST_SUITE_P(
    World4And8, CharLmMeshTest,
    ::testing::Values(MeshCase{4, 1, 1, cohort::Schedule::one_f_one_b, 2}, MeshCase{2, 2, 1, cohort::Schedule::gpipe, 2},
                      MeshCase{2, 1, 2, cohort::Schedule::one_f_one_b, 2}, MeshCase{1, 2, 2, cohort::Schedule::one_f_one_b, 4},
                      MeshCase{1, 4, 1, cohort::Schedule::gpipe, 4}, MeshCase{1, 1, 4, cohort::Schedule::one_f_one_b, 1},
                      MeshCase{1, 4, 1, cohort::Schedule::one_f_one_b, 8}, MeshCase{2, 2, 2, cohort::Schedule::one_f_one_b, 2},
                      MeshCase{1, 4, 2, cohort::Schedule::gpipe, 4}),
    [](const ::testing::TestParamInfo<MeshCase>& info) { return name_of(info.param); });

constexpr int kTrainSteps = 4;
constexpr double kLr = 0.01;

// The reference: plain Adam on the full float64 parameters, its losses.
std::vector<double> one_rank_losses() {
  std::vector<double> want;
  lm::FullParameters p;
  std::vector<at::Tensor> list;
  for (const auto& [name, t] : lm::full_parameters(kShape, kInit)) {
    p[name] = t.clone().requires_grad_(true);
    list.push_back(p[name]);
  }
  torch::optim::Adam adam(list, torch::optim::AdamOptions(kLr));
  for (int step = 0; step < kTrainSteps; ++step) {
    adam.zero_grad();
    const at::Tensor w = windows(step, {0, kBatch});
    const at::Tensor loss = lm::dense_loss(p, kShape, w.narrow(1, 0, kShape.seq_len), w.narrow(1, 1, kShape.seq_len));
    loss.backward();
    adam.step();
    want.push_back(loss.item<double>());
  }
  return want;
}

// kTrainSteps Adam steps of `c`'s mesh, plain (zero 0: the model averages
// the gradients over dp) or with ZeRO over dp (stage 1 or 2, reduce-scatter
// after the pipeline's micro-batches), against the one-rank losses.
void expect_follows_one_rank(const MeshCase& c, int zero, const std::vector<double>& want) {
  const int n = c.dp * c.pp * c.tp;
  PerRank<double> losses(n);
  run_world_ranks(n, [&](WorldRank& w) {
    cohort::Mesh mesh({.dp = c.dp, .pp = c.pp, .tp = c.tp}, w.world, w.store, {.engine = engine_test_options()});
    lm::ParallelLm model(mesh, kShape,
                         {.micro_batches = c.micro_batches, .schedule = c.schedule, .init = kInit,
                          .synchronize_gradients = zero == 0});
    const auto adam = cohort::optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(kLr));
    std::unique_ptr<torch::optim::Optimizer> plain;
    std::unique_ptr<cohort::ZeroOptimizer> sharded;
    if (zero == 0) plain = adam(model.parameters());
    else
      sharded = std::make_unique<cohort::ZeroOptimizer>(
          model.parameters(), adam,
          cohort::ZeroOptions{.stage = zero, .bucket_bytes = 4096, .overlap = false,
                              .engine = &mesh.engine(MeshAxis::dp)});
    const lm::RowRange rows = lm::replica_rows(kBatch, c.dp, mesh.rank(MeshAxis::dp));
    for (int step = 0; step < kTrainSteps; ++step) {
      if (plain) plain->zero_grad(); else sharded->zero_grad();
      const at::Tensor loss = model.forward_backward(windows(step, rows));
      if (plain) plain->step(); else sharded->step();
      losses.add(w.rank, model.global_loss(loss));
    }
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(losses.of(r).size(), size_t(kTrainSteps)) << name_of(c);
    for (int step = 0; step < kTrainSteps; ++step)
      EXPECT_NEAR(losses.of(r)[size_t(step)], want[size_t(step)], 1e-8 * want[size_t(step)])
          << name_of(c) << " zero " << zero << " rank " << r << " step " << step;
  }
}

// A few Adam steps on every world-4 mesh follow the one-rank model's curve.
TEST(CharLmTraining, EveryWorld4MeshFollowsTheOneRankLossCurve) {
  const std::vector<double> want = one_rank_losses();
  ASSERT_LT(want.back(), want.front()) << "the reference itself does not learn";
  for (const MeshCase& c :
       {MeshCase{4, 1, 1, cohort::Schedule::gpipe, 1}, MeshCase{2, 2, 1, cohort::Schedule::one_f_one_b, 2},
        MeshCase{2, 1, 2, cohort::Schedule::gpipe, 1}, MeshCase{1, 2, 2, cohort::Schedule::gpipe, 2},
        MeshCase{1, 4, 1, cohort::Schedule::one_f_one_b, 2}, MeshCase{1, 1, 4, cohort::Schedule::gpipe, 2}})
    expect_follows_one_rank(c, 0, want);
}

// ZeRO on the dp axis of meshes with pipeline stages (several micro-batches
// accumulate before the reduce-scatter) and tensor-parallel slices.
TEST(CharLmTraining, ZeroOverTheDpAxisFollowsTheOneRankLossCurve) {
  const std::vector<double> want = one_rank_losses();
  for (int zero : {1, 2})
    for (const MeshCase& c : {MeshCase{4, 1, 1, cohort::Schedule::gpipe, 1},
                              MeshCase{2, 2, 1, cohort::Schedule::one_f_one_b, 2},
                              MeshCase{2, 1, 2, cohort::Schedule::gpipe, 2}})
      expect_follows_one_rank(c, zero, want);
}

TEST(CharLmSampling, DrawsVocabularyCharactersUpToTheFirstNewline) {
  const auto vocab = lm::Vocabulary::from_text("\nabc");  // ids: '\n' 0, a 1, b 2, c 3
  const int64_t padded = 8;
  // Logits favour id (last id + 1) mod 4 strongly, and a padded id even more.
  std::vector<int64_t> contexts;
  auto cycle = [&](const at::Tensor& ids) {
    contexts.push_back(ids.size(1));
    at::Tensor logits = at::zeros({1, ids.size(1), padded}, at::kDouble);
    for (int64_t t = 0; t < ids.size(1); ++t) {
      logits[0][t][(ids[0][t].item<int64_t>() + 1) % 4] = 50;
      logits[0][t][padded - 1] = 100;  // padding: must never be drawn
    }
    return logits;
  };
  // Greedy from prompt "ab": c, then '\n' ends the line.
  EXPECT_EQ(lm::sample_line(cycle, 3, vocab, {.prompt = "ab", .max_chars = 10, .temperature = 0}), "abc");
  // Context is capped at 3; the prompt's unseen 'Z' reads as id 0 ('\n' is
  // the fallback without a space) but prints as given.
  contexts.clear();
  EXPECT_EQ(lm::sample_line(cycle, 3, vocab, {.prompt = "Z", .max_chars = 10, .temperature = 0}), "Zabc");
  EXPECT_EQ(contexts, (std::vector<int64_t>{1, 2, 3, 3}));
  EXPECT_EQ(lm::sample_line(cycle, 3, vocab, {.prompt = "Z", .max_chars = 2, .temperature = 0}), "Zab");
  // At a temperature the favoured character still wins almost surely, and
  // the same seed repeats the same line.
  const std::string hot = lm::sample_line(cycle, 3, vocab, {.max_chars = 5, .temperature = 1.0, .seed = 3});
  EXPECT_EQ(hot, "abc");
  // Uniform logits: every drawn character is a vocabulary one, and max_chars holds.
  auto flat = [&](const at::Tensor& ids) {
    at::Tensor l = at::zeros({1, ids.size(1), padded}, at::kDouble);
    l.narrow(2, 0, 1).fill_(-1e9);  // never '\n'
    return l;
  };
  const std::string line = lm::sample_line(flat, 4, vocab, {.max_chars = 40, .temperature = 1.0, .seed = 5});
  EXPECT_EQ(line.size(), 40u);
  EXPECT_EQ(line.find_first_not_of("abc"), std::string::npos) << line;
  EXPECT_EQ(line, lm::sample_line(flat, 4, vocab, {.max_chars = 40, .temperature = 1.0, .seed = 5}));
  EXPECT_NE(line, lm::sample_line(flat, 4, vocab, {.max_chars = 40, .temperature = 1.0, .seed = 6}));
  // Leading newlines (the gap between fortunes) are skipped, not a line.
  auto gap = [&](const at::Tensor& ids) {
    const int64_t n = ids.size(1);
    at::Tensor l = at::zeros({1, n, padded}, at::kDouble);
    l[0][n - 1][n < 3 ? 0 : n < 5 ? 1 : 0] = 50;  // '\n', '\n', a, a, '\n'
    return l;
  };
  EXPECT_EQ(lm::sample_line(gap, 10, vocab, {.max_chars = 10, .temperature = 0}), "aa");
  // A model returning too few logits is a clear error.
  auto narrow = [](const at::Tensor& ids) { return at::zeros({1, ids.size(1), 2}, at::kDouble); };
  EXPECT_THROW(lm::sample_line(narrow, 4, vocab, {.max_chars = 1}), ConfigError);
}

}  // namespace
}  // namespace cohort::testing::char_lm_test
