// Tensor collectives, ranks as threads: results against references computed
// locally, every dtype cohort moves, non-contiguous inputs, async handles,
// uneven allgather/alltoall/reduce_scatter, join, and the argument errors.
#include <gtest/gtest.h>

#include <atomic>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::collectives_test {
namespace {


// Rank r's input: small integers (exact in every dtype, f16 and bf16
// included) that differ per rank and per element.
at::Tensor rank_input(int rank, at::ScalarType dtype, std::vector<int64_t> shape) {
  const int64_t n = c10::multiply_integers(shape);
  return (at::arange(n, at::kLong).remainder(7) + rank * 3 + 1).to(dtype).reshape(shape);
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kChar,  at::kByte,   at::kInt,  at::kLong};

class TorchWorld : public ::testing::TestWithParam<int> {};

TEST_P(TorchWorld, AllreduceEveryDtypeAndOp) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    for (at::ScalarType dtype : kDtypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
        const at::Tensor in = rank_input(rank, dtype, {3, 5});
        std::vector<at::Tensor> all;
        for (int r = 0; r < size; ++r) all.push_back(rank_input(r, at::kDouble, {3, 5}));
        at::Tensor want = at::stack(all);
        switch (op) {
          case ReduceOp::sum: want = want.sum(0); break;
          case ReduceOp::avg: want = want.sum(0) / size; break;
          case ReduceOp::min: want = std::get<0>(want.min(0)); break;
          case ReduceOp::max: want = std::get<0>(want.max(0)); break;
          default: break;
        }
        const bool integral = !c10::isFloatingType(dtype);
        if (integral && op == ReduceOp::avg) want = want.floor();  // integer division
        const at::Tensor got = cohort::allreduce(in, {.op = op});
        COHORT_CHECK(got.scalar_type() == dtype && got.sizes() == in.sizes())
            << "allreduce changed dtype or shape";
        // f16/bf16 round the average; everything else is exact here.
        const double tol = (dtype == at::kHalf || dtype == at::kBFloat16) ? 0.05 : 1e-12;
        COHORT_CHECK((got.to(at::kDouble) - want).abs().max().item<double>() <= tol)
            << c10::toString(dtype) << " " << reduce_op_name(op) << " on rank " << rank << ": got " << got
            << " want " << want;
        // The input is untouched by the out-of-place form.
        COHORT_CHECK(at::equal(in, rank_input(rank, dtype, {3, 5}))) << "input modified";
      }
    }
  });
}

TEST_P(TorchWorld, InPlaceOnNonContiguousTensorWritesBack) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    at::Tensor base = rank_input(rank, at::kFloat, {4, 6});
    at::Tensor view = base.t();  // non-contiguous, aliases base
    COHORT_CHECK(!view.is_contiguous());
    const at::Tensor expected_view = (rank_input(0, at::kFloat, {4, 6}).t() * size) + 3.0 * size * (size - 1) / 2;
    at::Tensor result = cohort::allreduce_(view, {.name = "t", .op = ReduceOp::sum});
    COHORT_CHECK(result.is_same(view)) << "allreduce_ must return its argument";
    COHORT_CHECK(at::allclose(view, expected_view)) << "view " << view << " want " << expected_view;
    COHORT_CHECK(at::allclose(base, expected_view.t())) << "the storage behind the view was not updated";
    // Out of place on a non-contiguous slice: the result is contiguous and right.
    at::Tensor strided = rank_input(rank, at::kDouble, {10}).slice(0, 0, 10, 3);  // 4 elements, stride 3
    at::Tensor sum = cohort::allreduce(strided, {.op = ReduceOp::sum});
    at::Tensor want = at::zeros({4}, at::kDouble);
    for (int r = 0; r < size; ++r) want += rank_input(r, at::kDouble, {10}).slice(0, 0, 10, 3);
    COHORT_CHECK(sum.is_contiguous() && at::equal(sum, want)) << sum << " vs " << want;
  });
}

TEST_P(TorchWorld, AsyncHandlesCompleteInAnyWaitOrder) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    std::vector<cohort::TensorHandle> handles;
    std::vector<at::Tensor> inputs;
    // Submitted in a rank-dependent order: names match them up.
    for (int k = 0; k < 6; ++k) {
      const int i = (k + rank) % 6;
      inputs.push_back(at::full({int64_t(100 * i + 1)}, double(rank + i), at::kFloat));
      handles.push_back(cohort::allreduce_async(inputs.back(), {.name = "h" + std::to_string(i), .op = ReduceOp::sum}));
    }
    for (int k = 5; k >= 0; --k) {
      const int i = (k + rank) % 6;
      const at::Tensor got = handles[size_t(k)].wait();
      const double want = double(size) * i + size * (size - 1) / 2.0;
      COHORT_CHECK(got.numel() == 100 * i + 1 && (got == want).all().item<bool>())
          << "h" << i << " got " << got[0].item<double>() << " want " << want;
      COHORT_CHECK(handles[size_t(k)].poll()) << "a waited handle must poll done";
      COHORT_CHECK(at::equal(handles[size_t(k)].wait(), got)) << "a second wait() must return the same result";
    }
  });
}

TEST_P(TorchWorld, AllgatherWithDifferentRowCounts) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    // Rank r contributes r rows (rank 0 none) of shape [*, 2, 3].
    const at::Tensor mine = at::full({rank, 2, 3}, double(rank), at::kDouble);
    for (const std::string& name : {std::string("gather"), std::string()}) {
      const at::Tensor got = cohort::allgather(mine, {.name = name});
      int64_t rows = 0;
      for (int r = 0; r < size; ++r) rows += r;
      COHORT_CHECK(got.sizes() == at::IntArrayRef({rows, 2, 3})) << "shape " << got.sizes();
      int64_t at_row = 0;
      for (int r = 0; r < size; ++r) {
        COHORT_CHECK((got.narrow(0, at_row, r) == r).all().item<bool>()) << "rows of rank " << r;
        at_row += r;
      }
    }
    // Into a tensor of the caller's (a reused buffer): the result is it.
    int64_t rows = 0;
    for (int r = 0; r < size; ++r) rows += r;
    const at::Tensor into = at::full({rows, 2, 3}, -1.0, at::kDouble);
    const at::Tensor got = cohort::allgather(mine, {.name = "into", .out = into});
    COHORT_CHECK(got.is_same(into)) << "the result must be the given output";
    COHORT_CHECK(at::equal(into, cohort::allgather(mine))) << into;
    bool refused = false;
    try {
      cohort::allgather(mine, {.name = "wrong dtype", .out = at::empty({rows, 2, 3}, at::kFloat)});
    } catch (const cohort::ConfigError& e) {
      refused = std::string(e.what()).find("the output must be a contiguous Double tensor, got a Float one") !=
                std::string::npos;
    }
    COHORT_CHECK(refused) << "an output of another dtype must be refused";
    // A transposed (non-contiguous) input gathers its logical rows.
    const at::Tensor t = rank_input(rank, at::kInt, {3, 2}).t();
    const at::Tensor all = cohort::allgather(t, {.name = "transposed"});
    std::vector<at::Tensor> want;
    for (int r = 0; r < size; ++r) want.push_back(rank_input(r, at::kInt, {3, 2}).t());
    COHORT_CHECK(at::equal(all, at::cat(want))) << all;
  });
}

TEST_P(TorchWorld, BroadcastFromEveryRoot) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    for (int root = 0; root < size; ++root) {
      const at::Tensor mine = rank_input(rank, at::kBFloat16, {2, 3, 4});
      const at::Tensor got = cohort::broadcast(mine, {.name = "b", .root = root});
      COHORT_CHECK(at::equal(got, rank_input(root, at::kBFloat16, {2, 3, 4}))) << "root " << root;
      COHORT_CHECK(at::equal(mine, rank_input(rank, at::kBFloat16, {2, 3, 4}))) << "input modified";
      at::Tensor base = rank_input(rank, at::kLong, {3, 4});
      cohort::broadcast_(base.t(), {.root = root});
      COHORT_CHECK(at::equal(base, rank_input(root, at::kLong, {3, 4}))) << "in place, root " << root;
    }
  });
}

TEST_P(TorchWorld, AlltoallEvenAndUneven) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    // Even: 2 rows to every rank; row values encode (sender, receiver).
    at::Tensor even = at::empty({2 * size, 3}, at::kFloat);
    for (int p = 0; p < size; ++p) even.narrow(0, 2 * p, 2).fill_(100 * rank + p);
    const at::Tensor got = cohort::alltoall(even, {.name = "even"});
    for (int p = 0; p < size; ++p)
      COHORT_CHECK((got.narrow(0, 2 * p, 2) == 100 * p + rank).all().item<bool>()) << "even block from " << p;

    // Uneven: rank r sends (r + p) % 3 rows to rank p.
    auto split = [](int from, int to) { return int64_t((from + to) % 3); };
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int p = 0; p < size; ++p) splits.push_back(split(rank, p)), rows += splits.back();
    at::Tensor uneven = at::empty({rows, 2}, at::kLong);
    int64_t off = 0;
    for (int p = 0; p < size; ++p) {
      uneven.narrow(0, off, splits[size_t(p)]).fill_(1000 * rank + p);
      off += splits[size_t(p)];
    }
    for (const std::string& name : {std::string("uneven"), std::string()}) {
      cohort::TensorHandle h = cohort::alltoall_async(uneven, {.name = name, .splits = splits});
      const at::Tensor out = h.wait();
      int64_t at_row = 0;
      for (int p = 0; p < size; ++p) {
        const int64_t k = split(p, rank);
        COHORT_CHECK(h.received_splits().at(size_t(p)) == k) << "received splits from " << p;
        COHORT_CHECK((out.narrow(0, at_row, k) == 1000 * p + rank).all().item<bool>()) << "uneven block from " << p;
        at_row += k;
      }
      COHORT_CHECK(out.size(0) == at_row && out.size(1) == 2) << "shape " << out.sizes();
    }
  });
}

// Two uneven named alltoalls waited for in opposite orders on even and odd
// ranks: each one's data stage must be submitted when its split table
// completes (by the engine), not when the caller waits, or the ranks would
// each wait for a stage the other has not submitted. A third is dropped
// unwaited, and the engines shut down with it in flight or done (its buffers
// live in its stages, not in a thread).
TEST_P(TorchWorld, UnevenNamedAlltoallsCompleteInAnyWaitOrder) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    auto input = [&](int salt) {
      std::vector<int64_t> splits;
      for (int p = 0; p < size; ++p) splits.push_back((rank + p + salt) % 3);
      int64_t rows = 0;
      for (int64_t s : splits) rows += s;
      at::Tensor t = at::empty({rows}, at::kLong);
      int64_t off = 0;
      for (int p = 0; p < size; ++p) {
        t.narrow(0, off, splits[size_t(p)]).fill_(10000 * salt + 100 * rank + p);
        off += splits[size_t(p)];
      }
      return std::pair{t, splits};
    };
    auto [a, a_splits] = input(1);
    auto [b, b_splits] = input(2);
    auto [c, c_splits] = input(3);
    cohort::TensorHandle ha = cohort::alltoall_async(a, {.name = "order/a", .splits = a_splits});
    cohort::TensorHandle hb = cohort::alltoall_async(b, {.name = "order/b", .splits = b_splits});
    (void)cohort::alltoall_async(c, {.name = "order/dropped", .splits = c_splits});
    std::vector<std::pair<cohort::TensorHandle*, int>> order = {{&ha, 1}, {&hb, 2}};
    if (rank % 2 == 1) std::swap(order[0], order[1]);
    for (auto [h, salt] : order) {
      const at::Tensor out = h->wait();
      int64_t at_row = 0;
      for (int p = 0; p < size; ++p) {
        const int64_t k = (p + rank + salt) % 3;
        COHORT_CHECK_EQ(h->received_splits().at(size_t(p)), k) << "received splits from " << p;
        COHORT_CHECK((out.narrow(0, at_row, k) == 10000 * salt + 100 * p + rank).all().item<bool>())
            << "block from " << p << " of alltoall " << salt;
        at_row += k;
      }
      COHORT_CHECK_EQ(out.size(0), at_row);
    }
  });
}

TEST_P(TorchWorld, ReduceScatterSplitsRowsLikeHorovod) {
  const int n = GetParam();
  run_torch_ranks(n, [&](int rank, int size) {
    for (int64_t rows : {int64_t(0), int64_t(1), int64_t(size), int64_t(2 * size + 1), int64_t(7)}) {
      const at::Tensor in = rank_input(rank, at::kDouble, {std::max<int64_t>(rows, 0), 3});
      at::Tensor total = at::zeros_like(in);
      for (int r = 0; r < size; ++r) total += rank_input(r, at::kDouble, {rows, 3});
      const cohort::RowBlock block = cohort::reduce_scatter_block(rows, size, rank);
      const std::string name = "rs" + std::to_string(rows);
      const at::Tensor sum = cohort::reduce_scatter(in, {.name = name, .op = ReduceOp::sum});
      COHORT_CHECK(at::equal(sum, total.narrow(0, block.offset, block.rows)))
          << rows << " rows: got " << sum << " want rows " << block.offset << "+" << block.rows;
      const at::Tensor avg = cohort::reduce_scatter(in, {.name = name});
      COHORT_CHECK(at::allclose(avg, total.narrow(0, block.offset, block.rows) / size)) << "avg";
    }
  });
}

TEST_P(TorchWorld, JoinLetsRanksWithLessWorkFinish) {
  const int n = GetParam();
  std::atomic<int> last_joined{-2};
  run_torch_ranks(n, [&](int rank, int size) {
    // Rank r has r + 1 batches; joined ranks contribute nothing to avg.
    for (int step = 0; step <= rank; ++step) {
      const at::Tensor got = cohort::allreduce(at::full({4}, double(rank + 1), at::kDouble), {.name = "work"});
      // Ranks still working at `step`: those with rank >= step.
      double sum = 0, count = 0;
      for (int r = step; r < size; ++r) sum += r + 1, ++count;
      COHORT_CHECK((got == sum / count).all().item<bool>())
          << "step " << step << " on rank " << rank << ": " << got[0].item<double>() << " want " << sum / count;
    }
    const int last = cohort::join();
    COHORT_CHECK(last == size - 1) << "last joined " << last;
    cohort::barrier();
    last_joined = last;
  });
  EXPECT_EQ(last_joined.load(), n - 1);
}

INSTANTIATE_TEST_SUITE_P(Ranks, TorchWorld, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// ---- argument errors: clear ConfigErrors before anything is submitted ----

TEST(TorchCollectiveErrors, NameTheProblem) {
  run_torch_ranks(2, [&](int rank, int size) {
    const std::vector<std::pair<std::function<void()>, std::string>> cases = {
        {[] { cohort::allreduce(at::ones({3}, at::kBool), {.name = "flags"}); }, "allreduce 'flags': dtype Bool"},
        {[] { cohort::allreduce(at::ones({3}, at::kComplexFloat)); }, "dtype ComplexFloat is not supported"},
        {[] { cohort::allreduce(at::Tensor(), {.name = "u"}); }, "allreduce 'u': the tensor is undefined"},
        {[] { cohort::allreduce(at::empty({3}, at::TensorOptions().device(at::kMeta))); }, "this build of cohort moves CPU"},
        {[] { cohort::allreduce(at::eye(3).to_sparse()); }, "only dense (strided) tensors"},
        {[] { cohort::allgather(at::scalar_tensor(1.0)); }, "at least one dimension"},
        {[] { cohort::broadcast(at::ones({2}), {.root = 5}); }, "root 5 is not a rank of this group of 2"},
        {[] { cohort::alltoall(at::ones({3, 2})); }, "dim 0 (3) does not divide by the 2 ranks"},
        {[] { cohort::alltoall(at::ones({3, 2}), {.splits = {1, 1}}); }, "splits sum to 2 rows but the tensor has 3"},
        {[] { cohort::alltoall(at::ones({3, 2}), {.splits = {3}}); }, "1 splits given for 2 ranks"},
        {[] { cohort::alltoall(at::ones({3, 2}), {.splits = {4, -1}}); }, "negative split -1"},
    };
    for (const auto& [f, want] : cases) {
      const std::string got = config_error_of(f);
      COHORT_CHECK(got.find(want) != std::string::npos) << "expected an error containing '" << want << "', got '"
                                                        << got << "'";
    }
    // The engine is still healthy after the rejected calls.
    COHORT_CHECK(cohort::allreduce(at::ones({2}), {.name = "after", .op = ReduceOp::sum}).sum().item<double>() ==
                 2.0 * size);
  });
}

TEST(TorchCollectiveErrors, RanksDisagreeingOnShapeGetMismatchError) {
  std::vector<std::string> messages(2);
  run_torch_ranks(2, [&](int rank, int) {
    try {
      cohort::allreduce(at::ones({rank + 2}), {.name = "shape"});
    } catch (const MismatchError& e) {
      messages[size_t(rank)] = e.what();
    }
  });
  for (const std::string& m : messages) EXPECT_NE(m.find("shape"), std::string::npos) << m;
}

TEST(TorchCollectiveErrors, NoEngineIsAConfigError) {
  const std::string got = config_error_of([] { cohort::allreduce(at::ones({2})); });
  EXPECT_NE(got.find("cohort::init()"), std::string::npos) << got;
}

}  // namespace
}  // namespace cohort::testing::collectives_test
