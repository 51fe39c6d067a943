// Mesh: coordinates from the documented layout, each axis's group holding
// exactly the ranks that share the other two coordinates (checked by
// gathering world ranks over the group), engines reducing over their group,
// and a clear error for sizes that do not multiply to the world size.
#include "cohort/torch/model_parallel/mesh.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "cohort/torch/core/collectives.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::mesh_test {
namespace {

using testing::PerRank;
using testing::run_world_ranks;
using testing::run_world_ranks_collect;
using testing::WorldRank;

// The world ranks of `world_rank`'s group along `axis`, in group-rank order,
// computed independently of Mesh (by enumerating all coordinates).
std::vector<int> expected_group(const MeshShape& s, int world_rank, MeshAxis axis) {
  const int n = s.dp * s.pp * s.tp;
  // Coordinates by brute force from the formula rank = (dp*pp + pp_i)*tp + tp_i.
  std::vector<MeshCoordinates> coords(static_cast<size_t>(n));
  for (int d = 0; d < s.dp; ++d)
    for (int p = 0; p < s.pp; ++p)
      for (int t = 0; t < s.tp; ++t) coords[size_t((d * s.pp + p) * s.tp + t)] = {d, p, t};
  const MeshCoordinates me = coords[size_t(world_rank)];
  std::vector<std::pair<int, int>> members;  // (coordinate on axis, world rank)
  for (int r = 0; r < n; ++r) {
    const MeshCoordinates c = coords[size_t(r)];
    const bool same = axis == MeshAxis::dp   ? (c.pp == me.pp && c.tp == me.tp)
                      : axis == MeshAxis::pp ? (c.dp == me.dp && c.tp == me.tp)
                                             : (c.dp == me.dp && c.pp == me.pp);
    if (same) members.push_back({axis == MeshAxis::dp ? c.dp : axis == MeshAxis::pp ? c.pp : c.tp, r});
  }
  std::sort(members.begin(), members.end());
  std::vector<int> out;
  for (auto& m : members) out.push_back(m.second);
  return out;
}

class MeshGroupsTest : public ::testing::TestWithParam<MeshShape> {};

TEST_P(MeshGroupsTest, CoordinatesAndGroupsFollowTheLayout) {
  const MeshShape s = GetParam();
  const int n = s.dp * s.pp * s.tp;
  PerRank<std::string> failures(n);
  run_world_ranks(n, [&](WorldRank& w) {
    Mesh mesh(s, w.world, w.store, {.engines = false});
    auto fail = [&](const std::string& what) { failures.add(w.rank, what); };
    const MeshCoordinates c = mesh.coordinates();
    if ((c.dp * s.pp + c.pp) * s.tp + c.tp != w.rank) fail("coordinates do not give back the world rank");
    if (!(Mesh::coordinates_of(s, w.rank) == c)) fail("coordinates_of differs from coordinates()");
    if (mesh.world_rank() != w.rank || mesh.world_size() != n) fail("world rank or size");
    for (MeshAxis a : {MeshAxis::dp, MeshAxis::pp, MeshAxis::tp}) {
      const auto& comm = mesh.comm(a);
      const std::vector<int> want = expected_group(s, w.rank, a);
      if (comm->size() != int(want.size()) || mesh.size(a) != int(want.size()))
        fail(std::string(axis_name(a)) + " group size");
      if (want[size_t(comm->rank())] != w.rank || mesh.rank(a) != comm->rank())
        fail(std::string(axis_name(a)) + " rank in group");
      int32_t mine = w.rank;
      std::vector<int32_t> got(size_t(comm->size()));
      comm->allgather(BufferView{&mine, 1, DType::i32}, BufferView{got.data(), got.size(), DType::i32});
      if (std::vector<int>(got.begin(), got.end()) != want) fail(std::string(axis_name(a)) + " group members");
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failures.of(r).empty()) << "rank " << r << ": " << failures.of(r).front();
}

INSTANTIATE_TEST_SUITE_P(World4And8, MeshGroupsTest,
                         ::testing::Values(MeshShape{.dp = 2, .pp = 2, .tp = 1}, MeshShape{.dp = 1, .pp = 2, .tp = 2},
                                           MeshShape{.dp = 4, .pp = 1, .tp = 1}, MeshShape{.dp = 1, .pp = 1, .tp = 4},
                                           MeshShape{.dp = 2, .pp = 2, .tp = 2}, MeshShape{.dp = 2, .pp = 4, .tp = 1},
                                           MeshShape{.dp = 1, .pp = 8, .tp = 1}),
                         [](const auto& info) {
                           const MeshShape& s = info.param;
                           return "dp" + std::to_string(s.dp) + "pp" + std::to_string(s.pp) + "tp" +
                                  std::to_string(s.tp);
                         });

TEST(MeshTest, EnginesReduceOverTheirGroup) {
  // World 8 as 2 x 2 x 2: the dp engine sums the world ranks of the dp group,
  // the tp engine those of the tp group; pp has no engine.
  const MeshShape s{.dp = 2, .pp = 2, .tp = 2};
  PerRank<double> dp_sum(8), tp_sum(8);
  PerRank<int> pp_refused(8);
  run_world_ranks(8, [&](WorldRank& w) {
    MeshOptions o;
    o.engine = testing::engine_test_options();
    Mesh mesh(s, w.world, w.store, o);
    const at::Tensor mine = at::full({3}, double(w.rank), at::kDouble);
    dp_sum.add(w.rank, allreduce(mine, {.op = ReduceOp::sum, .engine = &mesh.engine(MeshAxis::dp)})[2].item<double>());
    tp_sum.add(w.rank, allreduce(mine, {.op = ReduceOp::sum, .engine = &mesh.engine(MeshAxis::tp)})[2].item<double>());
    try {
      mesh.engine(MeshAxis::pp);
      pp_refused.add(w.rank, 0);
    } catch (const ConfigError&) {
      pp_refused.add(w.rank, 1);
    }
  });
  for (int r = 0; r < 8; ++r) {
    auto sum_of = [&](MeshAxis a) {
      const auto g = expected_group(s, r, a);
      return double(std::accumulate(g.begin(), g.end(), 0));
    };
    EXPECT_EQ(dp_sum.of(r).at(0), sum_of(MeshAxis::dp)) << "rank " << r;
    EXPECT_EQ(tp_sum.of(r).at(0), sum_of(MeshAxis::tp)) << "rank " << r;
    EXPECT_EQ(pp_refused.of(r).at(0), 1) << "rank " << r;
  }
}

TEST(MeshTest, SuccessiveMeshesOnOneStoreDoNotCollide) {
  PerRank<double> sums(4);
  run_world_ranks(4, [&](WorldRank& w) {
    MeshOptions o;
    o.engine = testing::engine_test_options();
    for (int i = 0; i < 2; ++i) {
      Mesh mesh({.dp = 4}, w.world, w.store, o);
      sums.add(w.rank, allreduce(at::ones({1}), {.op = ReduceOp::sum, .engine = &mesh.engine(MeshAxis::dp)})
                           .item<double>());
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(sums.of(r), (std::vector<double>{4, 4}));
}

TEST(MeshTest, SizesThatDoNotMultiplyToTheWorldAreAConfigErrorOnEveryRank) {
  for (const MeshShape& bad : {MeshShape{.dp = 2, .pp = 2, .tp = 2}, MeshShape{.dp = 3, .pp = 1, .tp = 1},
                               MeshShape{.dp = 0, .pp = 4, .tp = 1}}) {
    const auto errors = run_world_ranks_collect(4, [&](WorldRank& w) { Mesh mesh(bad, w.world, w.store); });
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(errors[size_t(r)]) << "rank " << r << " accepted dp=" << bad.dp << " pp=" << bad.pp;
      try {
        std::rethrow_exception(errors[size_t(r)]);
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("dp=" + std::to_string(bad.dp)), std::string::npos) << what;
        if (bad.dp > 0) {
          EXPECT_NE(what.find("the world has 4"), std::string::npos) << what;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": not a ConfigError: " << e.what();
      }
    }
  }
}

TEST(MeshTest, LayoutArithmetic) {
  const MeshShape s{.dp = 2, .pp = 3, .tp = 2};
  for (int r = 0; r < 12; ++r) EXPECT_EQ(Mesh::world_rank_of(s, Mesh::coordinates_of(s, r)), r);
  EXPECT_EQ(Mesh::world_rank_of(s, {.dp = 1, .pp = 2, .tp = 1}), 11);
  EXPECT_EQ(Mesh::coordinates_of(s, 7), (MeshCoordinates{.dp = 1, .pp = 0, .tp = 1}));
  EXPECT_THROW(Mesh::coordinates_of(s, 12), ConfigError);
  EXPECT_THROW(Mesh::world_rank_of(s, {.dp = 2}), ConfigError);
  EXPECT_THROW(Mesh::check_shape({.dp = 2, .pp = 2}, 5), ConfigError);
  EXPECT_NO_THROW(Mesh::check_shape({.dp = 5}, 5));
}

}  // namespace
}  // namespace cohort::mesh_test
