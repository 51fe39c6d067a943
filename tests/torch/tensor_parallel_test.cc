// Tensor-parallel layers against single-process float64 references, ranks as
// threads (tp = world size = 1, 2, 4): the four region functions, column- and
// row-parallel linear layers, the vocab-parallel embedding and the parallel
// cross-entropy. Every test compares outputs, input gradients and each
// rank's parameter gradients with the matching slice of the reference's.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>

#include "cohort/common/check.h"
#include "cohort/torch/model_parallel/parallel_cross_entropy.h"
#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/model_parallel/tensor_parallel_region.h"
#include "cohort/torch/model_parallel/vocab_parallel_embedding.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::tensor_parallel_test {
namespace {


// The same values on every rank thread (a private generator: the global one
// is shared by the threads).
at::Tensor randn(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::empty(shape, at::kDouble).normal_(0.0, 1.0, gen);
}

at::Tensor rand_ids(std::vector<int64_t> shape, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::empty(shape, at::kLong).random_(0, vocab, gen);
}

// float64 results of the same computation in a different order agree to
// ~1e-15 relative; 1e-10 leaves room and would still catch any wrong slice.
void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what, int rank) {
  COHORT_CHECK(got.defined() && want.defined()) << what << " on rank " << rank << ": undefined tensor";
  COHORT_CHECK(got.sizes() == want.sizes())
      << what << " on rank " << rank << ": shape " << got.sizes() << " vs " << want.sizes();
  const double scale = want.abs().max().item<double>() + 1e-12;
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  COHORT_CHECK(diff <= 1e-10 * scale) << what << " on rank " << rank << ": max |diff| " << diff << " (scale " << scale
                                      << ")";
}

// Runs fn on every rank and returns the message of the ConfigError it
// throws (every rank must throw one; "" when none does).
std::string config_error_of(int n, const std::function<void(int, int)>& fn) {
  PerRank<std::string> messages(n);
  run_torch_ranks(n, [&](int rank, int size) {
    try {
      fn(rank, size);
      messages.add(rank, "");
    } catch (const ConfigError& e) {
      messages.add(rank, e.what());
    }
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(messages.of(r)[0].empty(), messages.of(0)[0].empty()) << "rank " << r;
  return messages.of(0)[0];
}

class TensorParallel : public ::testing::TestWithParam<int> {};

// ---- region functions ----

// One test for the four functions: each ctest case costs a process start.
TEST_P(TensorParallel, RegionFunctionsForwardAndBackward) {
  run_torch_ranks(GetParam(), [](int rank, int size) {
    const cohort::TensorParallelGroup g = cohort::TensorParallelGroup::of();
    COHORT_CHECK(g.rank == rank && g.size == size) << "group of rank " << rank;
    // copy_to: identity forward, gradients summed over the group.
    const at::Tensor x = randn({3, 4}, 1).requires_grad_();
    const at::Tensor y = cohort::copy_to_tensor_parallel_region(x, g);
    expect_close(y, x.detach(), "copy_to forward", rank);
    (y * randn({3, 4}, 100 + rank)).sum().backward();  // rank r's upstream gradient
    at::Tensor want = at::zeros({3, 4}, at::kDouble);
    for (int r = 0; r < size; ++r) want += randn({3, 4}, 100 + r);
    expect_close(x.grad(), want, "copy_to backward", rank);

    // reduce_from: sum forward, gradients passed through.
    const at::Tensor xr = randn({2, 5}, 10 + rank).requires_grad_();
    const at::Tensor yr = cohort::reduce_from_tensor_parallel_region(xr, g);
    at::Tensor sum = at::zeros({2, 5}, at::kDouble);
    for (int r = 0; r < size; ++r) sum += randn({2, 5}, 10 + r);
    expect_close(yr, sum, "reduce_from forward", rank);
    const at::Tensor upr = randn({2, 5}, 7);
    (yr * upr).sum().backward();
    expect_close(xr.grad(), upr, "reduce_from backward", rank);

    // gather and scatter along the last dim.
    const int64_t part = 3;
    // The full tensor (2, 3, size * part); rank r holds columns [r * part, (r + 1) * part).
    const at::Tensor full = randn({2, 3, size * part}, 5);
    const at::Tensor mine = full.narrow(-1, rank * part, part).contiguous().requires_grad_();
    const at::Tensor gathered = cohort::gather_from_tensor_parallel_region(mine, g);
    expect_close(gathered, full, "gather forward", rank);
    const at::Tensor up = randn({2, 3, size * part}, 6);  // the same on every rank (replicated region)
    (gathered * up).sum().backward();
    expect_close(mine.grad(), up.narrow(-1, rank * part, part), "gather backward", rank);

    const at::Tensor whole = full.clone().requires_grad_();
    const at::Tensor scattered = cohort::scatter_to_tensor_parallel_region(whole, g);
    expect_close(scattered, full.narrow(-1, rank * part, part), "scatter forward", rank);
    // Rank r's upstream gradient covers its slice; backward joins the slices.
    (scattered * randn({2, 3, part}, 200 + rank)).sum().backward();
    std::vector<at::Tensor> slices;
    for (int r = 0; r < size; ++r) slices.push_back(randn({2, 3, part}, 200 + r));
    expect_close(whole.grad(), at::cat(slices, -1), "scatter backward", rank);
  });
}

// ---- linear layers ----

// A linear layer's reference on one rank: the full float64 computation with
// autograd, from the same full weights.
struct LinearReference {
  at::Tensor x, w, b, y;
  LinearReference(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
    x = input.clone().requires_grad_();
    w = weight.clone().requires_grad_();
    b = bias.defined() ? bias.clone().requires_grad_() : at::Tensor();
    y = at::linear(x, w, b);
  }
};

struct ColumnCase {
  bool bias, gather_output;
  int64_t chunks;
};

TEST_P(TensorParallel, ColumnParallelLinearMatchesFullLinear) {
  const int n = GetParam();
  for (ColumnCase c : {ColumnCase{true, true, 1}, ColumnCase{true, false, 1}, ColumnCase{false, true, 1},
                       ColumnCase{true, true, 3}, ColumnCase{true, false, 3}}) {
    SCOPED_TRACE(::testing::Message() << "bias " << c.bias << " gather " << c.gather_output << " chunks " << c.chunks);
    run_torch_ranks(n, [&](int rank, int size) {
      const int64_t in = 6, out = 12 * c.chunks;
      cohort::ColumnParallelLinear layer(
          in, out, {.bias = c.bias, .gather_output = c.gather_output, .chunks = c.chunks, .dtype = at::kDouble});
      const at::Tensor w = randn({out, in}, 1), b = c.bias ? randn({out}, 2) : at::Tensor();
      layer->load_full(w, b);
      LinearReference ref(randn({2, 3, in}, 3), w, b);
      const at::Tensor up = randn({2, 3, out}, 4);  // d loss / d y of the full layer
      (ref.y * up).sum().backward();

      const at::Tensor x = ref.x.detach().clone().requires_grad_();
      const at::Tensor y = layer->forward(x);
      const cohort::ShardSpec spec{.dim = 0, .chunks = c.chunks};
      if (c.gather_output) {
        expect_close(y, ref.y.detach(), "gathered output", rank);
        (y * up).sum().backward();
      } else {
        // This rank's columns of the output, in the chunked layout.
        const at::Tensor want = cohort::shard_of(ref.y.detach().movedim(-1, 0), spec, layer->group(), "y").movedim(0, -1);
        expect_close(y, want, "local output", rank);
        (y * cohort::shard_of(up.movedim(-1, 0), spec, layer->group(), "up").movedim(0, -1)).sum().backward();
      }
      expect_close(x.grad(), ref.x.grad(), "input gradient", rank);
      expect_close(layer->weight.grad(), cohort::shard_of(ref.w.grad(), spec, layer->group(), "w"), "weight gradient",
                   rank);
      if (c.bias)
        expect_close(layer->bias.grad(), cohort::shard_of(ref.b.grad(), spec, layer->group(), "b"), "bias gradient", rank);
      COHORT_CHECK(layer->local_out_features() == out / size);
    });
  }
}

TEST_P(TensorParallel, RowParallelLinearMatchesFullLinear) {
  const int n = GetParam();
  for (bool input_is_parallel : {false, true}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "input_is_parallel " << input_is_parallel << " bias " << bias);
      run_torch_ranks(n, [&](int rank, int size) {
        const int64_t in = 8, out = 5;
        cohort::RowParallelLinear layer(in, out,
                                    {.bias = bias, .input_is_parallel = input_is_parallel, .dtype = at::kDouble});
        const at::Tensor w = randn({out, in}, 11), b = bias ? randn({out}, 12) : at::Tensor();
        layer->load_full(w, b);
        LinearReference ref(randn({4, in}, 13), w, b);
        const at::Tensor up = randn({4, out}, 14);
        (ref.y * up).sum().backward();

        const int64_t part = in / size;
        const at::Tensor full_x = ref.x.detach().clone().requires_grad_();
        const at::Tensor x =
            input_is_parallel ? full_x.detach().narrow(-1, rank * part, part).contiguous().requires_grad_() : full_x;
        const at::Tensor y = layer->forward(x);
        expect_close(y, ref.y.detach(), "output", rank);
        (y * up).sum().backward();
        const at::Tensor want_x_grad = input_is_parallel ? ref.x.grad().narrow(-1, rank * part, part) : ref.x.grad();
        expect_close(x.grad(), want_x_grad, "input gradient", rank);
        expect_close(layer->weight.grad(), ref.w.grad().narrow(1, rank * part, part), "weight gradient", rank);
        if (bias) expect_close(layer->bias.grad(), ref.b.grad(), "bias gradient (replicated)", rank);
      });
    }
  }
}

// Column then row, Megatron's MLP: one allreduce forward, one backward, and
// the result of the full two-layer network.
TEST_P(TensorParallel, ColumnThenRowMatchesTwoFullLayers) {
  run_torch_ranks(GetParam(), [](int rank, int) {
    const int64_t d = 4, hidden = 16;
    cohort::ColumnParallelLinear fc(d, hidden, {.gather_output = false, .dtype = at::kDouble});
    cohort::RowParallelLinear proj(hidden, d, {.input_is_parallel = true, .dtype = at::kDouble});
    const std::map<std::string, at::Tensor> w1 = {{"weight", randn({hidden, d}, 21)}, {"bias", randn({hidden}, 22)}};
    const std::map<std::string, at::Tensor> w2 = {{"weight", randn({d, hidden}, 23)}, {"bias", randn({d}, 24)}};
    cohort::load_full_parameters(*fc, w1);
    cohort::load_full_parameters(*proj, w2);
    LinearReference l1(randn({3, d}, 25), w1.at("weight"), w1.at("bias"));
    LinearReference l2(at::relu(l1.y).detach(), w2.at("weight"), w2.at("bias"));
    // Chained through l1's graph (l2.x is only a placeholder).
    const at::Tensor ref_y = at::linear(at::relu(l1.y), l2.w, l2.b);
    ref_y.pow(2).sum().backward();

    const at::Tensor x = l1.x.detach().clone().requires_grad_();
    const at::Tensor y = proj->forward(at::relu(fc->forward(x)));
    expect_close(y, ref_y.detach(), "output", rank);
    y.pow(2).sum().backward();
    expect_close(x.grad(), l1.x.grad(), "input gradient", rank);
    const auto grads1 = cohort::gather_full_parameters(*fc, /*gradients=*/true);
    const auto grads2 = cohort::gather_full_parameters(*proj, /*gradients=*/true);
    expect_close(grads1.at("weight"), l1.w.grad(), "fc weight gradient (gathered)", rank);
    expect_close(grads1.at("bias"), l1.b.grad(), "fc bias gradient (gathered)", rank);
    expect_close(grads2.at("weight"), l2.w.grad(), "proj weight gradient (gathered)", rank);
    expect_close(grads2.at("bias"), l2.b.grad(), "proj bias gradient", rank);
  });
}

// Megatron's initialisation: the same seed gives the same full weights at
// any tp size, equal to full_linear_init's.
TEST_P(TensorParallel, SeededInitialisationIsIndependentOfTensorParallelSize) {
  run_torch_ranks(GetParam(), [](int rank, int) {
    cohort::ColumnParallelLinear col(6, 8, {.chunks = 2, .seed = 42, .dtype = at::kDouble});
    cohort::RowParallelLinear row(8, 6, {.seed = 43, .dtype = at::kDouble});
    cohort::VocabParallelEmbedding emb(16, 4, {.seed = 44, .dtype = at::kDouble});
    const cohort::FullLinearInit c = cohort::full_linear_init(6, 8, true, 42, at::kDouble);
    const cohort::FullLinearInit r = cohort::full_linear_init(8, 6, true, 43, at::kDouble);
    auto full_col = cohort::gather_full_parameters(*col), full_row = cohort::gather_full_parameters(*row);
    COHORT_CHECK(at::equal(full_col.at("weight"), c.weight) && at::equal(full_col.at("bias"), c.bias))
        << "column layer's gathered weights differ from the seed's on rank " << rank;
    COHORT_CHECK(at::equal(full_row.at("weight"), r.weight) && at::equal(full_row.at("bias"), r.bias))
        << "row layer's gathered weights differ from the seed's on rank " << rank;
    // The embedding's table: standard normal from the seed's generator.
    at::Generator gen = at::detail::createCPUGenerator(44);
    const at::Tensor want = at::empty({16, 4}, at::kDouble).normal_(0.0, 1.0, gen);
    COHORT_CHECK(at::equal(cohort::gather_full_parameters(*emb).at("weight"), want))
        << "embedding's gathered table differs from the seed's on rank " << rank;
    // Different seeds, different weights (the seed is used).
    COHORT_CHECK(!at::equal(c.weight, cohort::full_linear_init(6, 8, true, 41, at::kDouble).weight));
  });
}

// ---- vocab-parallel embedding ----

TEST_P(TensorParallel, VocabParallelEmbeddingMatchesFullEmbedding) {
  run_torch_ranks(GetParam(), [](int rank, int size) {
    const int64_t vocab = 12, dim = 5;
    cohort::VocabParallelEmbedding emb(vocab, dim, {.dtype = at::kDouble});
    const at::Tensor table = randn({vocab, dim}, 31);
    emb->load_full(table);
    COHORT_CHECK(emb->vocab_start() == rank * vocab / size && emb->vocab_end() == (rank + 1) * vocab / size);
    // Every id at least once, some repeated (gradients accumulate).
    const at::Tensor ids = at::cat({at::arange(vocab, at::kLong), rand_ids({10}, vocab, 32)}).reshape({2, 11});
    const at::Tensor ref_table = table.clone().requires_grad_();
    const at::Tensor ref = at::embedding(ref_table, ids);
    const at::Tensor up = randn({2, 11, dim}, 33);
    (ref * up).sum().backward();

    const at::Tensor y = emb->forward(ids);
    expect_close(y, ref.detach(), "embedding output", rank);
    (y * up).sum().backward();
    const int64_t part = vocab / size;
    expect_close(emb->weight.grad(), ref_table.grad().narrow(0, rank * part, part), "embedding gradient", rank);
  });
}

// ---- parallel cross-entropy ----

TEST_P(TensorParallel, ParallelCrossEntropyMatchesCrossEntropyOnFullLogits) {
  run_torch_ranks(GetParam(), [](int rank, int size) {
    namespace F = torch::nn::functional;
    const int64_t vocab = 16, part = vocab / size;
    // Large logits check the max shift (exp(300) overflows without it).
    for (double scale : {1.0, 300.0}) {
      for (cohort::LossReduction reduction : {cohort::LossReduction::mean, cohort::LossReduction::sum, cohort::LossReduction::none}) {
        const at::Tensor full = randn({3, 5, vocab}, 41) * scale;
        const at::Tensor target = rand_ids({3, 5}, vocab, 42);
        const at::Tensor ref_logits = full.clone().requires_grad_();
        const at::Tensor ref_flat = F::cross_entropy(ref_logits.reshape({-1, vocab}), target.reshape({-1}),
                                                     F::CrossEntropyFuncOptions().reduction(torch::kNone))
                                        .reshape({3, 5});
        at::Tensor ref = reduction == cohort::LossReduction::mean  ? ref_flat.mean()
                         : reduction == cohort::LossReduction::sum ? ref_flat.sum()
                                                               : ref_flat;
        const at::Tensor up = reduction == cohort::LossReduction::none ? randn({3, 5}, 43) : at::ones({}, at::kDouble);
        (ref * up).sum().backward();

        const at::Tensor logits = full.narrow(-1, rank * part, part).contiguous().requires_grad_();
        const at::Tensor loss = cohort::parallel_cross_entropy(logits, target, {.reduction = reduction});
        expect_close(loss, ref.detach(), "loss", rank);
        (loss * up).sum().backward();
        expect_close(logits.grad(), ref_logits.grad().narrow(-1, rank * part, part), "logits gradient", rank);
      }
    }
  });
}

// The LM head path end to end: a ColumnParallelLinear without gather feeds
// the parallel cross-entropy; the full logits never exist.
TEST_P(TensorParallel, LanguageModelHeadWithParallelCrossEntropy) {
  run_torch_ranks(GetParam(), [](int rank, int) {
    namespace F = torch::nn::functional;
    const int64_t d = 6, vocab = 8;
    cohort::ColumnParallelLinear head(d, vocab, {.bias = false, .gather_output = false, .dtype = at::kDouble});
    const at::Tensor w = randn({vocab, d}, 51);
    head->load_full(w);
    const at::Tensor h = randn({2, 4, d}, 52), target = rand_ids({2, 4}, vocab, 53);
    LinearReference ref(h, w, at::Tensor());
    F::cross_entropy(ref.y.reshape({-1, vocab}), target.reshape({-1})).backward();

    const at::Tensor x = h.clone().requires_grad_();
    const at::Tensor loss = cohort::parallel_cross_entropy(head->forward(x), target);
    expect_close(loss, F::cross_entropy(ref.y.detach().reshape({-1, vocab}), target.reshape({-1})), "loss", rank);
    loss.backward();
    expect_close(x.grad(), ref.x.grad(), "hidden-state gradient", rank);
    expect_close(cohort::gather_full_parameters(*head, true).at("weight"), ref.w.grad(), "head weight gradient", rank);
  });
}

// ---- loading and errors ----

TEST(TensorParallelErrors, LoadFullParametersRejectsMissingExtraAndMisshapenTensors) {
  const int n = 2;
  auto make = [] { return cohort::ColumnParallelLinear(4, 8, {.dtype = at::kDouble}); };
  EXPECT_NE(config_error_of(n,
                            [&](int, int) {
                              cohort::load_full_parameters(*make(), {{"weight", randn({8, 4}, 1)}});
                            })
                .find("no tensor for parameter 'bias'"),
            std::string::npos);
  EXPECT_NE(config_error_of(n,
                            [&](int, int) {
                              cohort::load_full_parameters(
                                  *make(),
                                  {{"weight", randn({8, 4}, 1)}, {"bias", randn({8}, 2)}, {"bais", randn({8}, 2)}});
                            })
                .find("'bais' is not a parameter"),
            std::string::npos);
  EXPECT_NE(
      config_error_of(n,
                      [&](int, int) {
                        cohort::load_full_parameters(*make(), {{"weight", randn({8, 5}, 1)}, {"bias", randn({8}, 2)}});
                      })
          .find("parameter 'weight'"),
      std::string::npos);
  EXPECT_NE(config_error_of(n,
                            [&](int, int) {
                              make()->load_full(randn({4, 8}, 1), randn({8}, 2));
                            })
                .find("(8, 4)"),
            std::string::npos);
}

TEST(TensorParallelErrors, SplitDimensionsMustDivideByTheGroupSize) {
  std::string m = config_error_of(4, [](int, int) { cohort::ColumnParallelLinear(4, 6); });
  EXPECT_NE(m.find("ColumnParallelLinear out_features = 6 does not divide by the tensor-parallel size 4"),
            std::string::npos)
      << m;
  m = config_error_of(2, [](int, int) { cohort::ColumnParallelLinear(4, 9, {.chunks = 3}); });
  EXPECT_NE(m.find("out_features / chunks = 3 does not divide by the tensor-parallel size 2"), std::string::npos) << m;
  m = config_error_of(4, [](int, int) { cohort::RowParallelLinear(10, 4); });
  EXPECT_NE(m.find("RowParallelLinear in_features = 10 does not divide"), std::string::npos) << m;
  m = config_error_of(2, [](int, int) { cohort::VocabParallelEmbedding(7, 4); });
  EXPECT_NE(m.find("VocabParallelEmbedding vocab_size = 7 does not divide"), std::string::npos) << m;
  // And they are fine at tp = 1.
  EXPECT_EQ(config_error_of(1, [](int, int) { cohort::ColumnParallelLinear(4, 6); }), "");
}

TEST(TensorParallelErrors, BadInputsNameTheProblem) {
  std::string m = config_error_of(2, [](int, int) {
    cohort::ColumnParallelLinear l(4, 8);
    l->forward(at::zeros({2, 5}));
  });
  EXPECT_NE(m.find("input must be (..., 4)"), std::string::npos) << m;
  m = config_error_of(2, [](int, int) {
    cohort::RowParallelLinear l(8, 4, {.input_is_parallel = true});
    l->forward(at::zeros({2, 8}));
  });
  EXPECT_NE(m.find("input must be (..., 4) (this rank's slice"), std::string::npos) << m;
  m = config_error_of(2, [](int, int) {
    cohort::VocabParallelEmbedding e(8, 4);
    e->forward(at::full({3}, 8, at::kLong));
  });
  EXPECT_NE(m.find("ids must lie in [0, 8)"), std::string::npos) << m;
  m = config_error_of(2, [](int, int) { cohort::parallel_cross_entropy(at::zeros({3, 4}), at::full({3}, 8, at::kLong)); });
  EXPECT_NE(m.find("targets must lie in [0, 8)"), std::string::npos) << m;
  m = config_error_of(2, [](int, int) { cohort::parallel_cross_entropy(at::zeros({3, 4}), at::zeros({4}, at::kLong)); });
  EXPECT_NE(m.find("target shape"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(TpSizes, TensorParallel, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

}  // namespace
}  // namespace cohort::testing::tensor_parallel_test
