// Several engines at once: one over the world and one over each half of a
// split, used concurrently from different threads.
#include <gtest/gtest.h>

#include "tests/engine/engine_ranks.h"

namespace cohort::testing::engine_groups_test {
namespace {

using engine::Engine;
using engine::Handle;

TEST(EngineGroups, WorldAndSplitGroupsRunConcurrently) {
  const int n = 4;
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto world = std::make_shared<comm::shm::Communicator>(std::make_shared<rendezvous::PrefixStore>("comm", store),
                                                               r, n, engine_comm_options());
        // Split before any engine owns the world communicator.
        std::shared_ptr<comm::Communicator> half(world->split(r % 2, r));
        const int color = r % 2;
        auto opts = engine_test_options();
        opts.label = "world";
        Engine we(world, std::make_shared<rendezvous::PrefixStore>("engine/world", store), opts);
        opts.label = "half" + std::to_string(color);
        Engine he(half, std::make_shared<rendezvous::PrefixStore>("engine/half" + std::to_string(color), store), opts);
        EXPECT_EQ(he.size(), 2);
        EXPECT_EQ(he.rank(), r / 2);
        // The same names on both engines: they are separate namespaces.
        auto run = [&](Engine& e, float expect) {
          for (int step = 0; step < 5; ++step) {
            std::vector<std::vector<float>> bufs(10, std::vector<float>(50, float(r)));
            std::vector<Handle> hs;
            for (int i = 0; i < 10; ++i)
              hs.push_back(e.allreduce_async("g" + std::to_string(i), BufferView{bufs[size_t(i)].data(), 50, DType::f32}));
            for (int i = 0; i < 10; ++i) {
              hs[size_t(i)].wait();
              EXPECT_EQ(bufs[size_t(i)][0], expect) << "step " << step << " op " << i;
            }
          }
        };
        std::thread t([&] { run(he, color == 0 ? 0 + 2 : 1 + 3); });
        run(we, 0 + 1 + 2 + 3);
        t.join();
        EXPECT_EQ(we.stats().ops_completed, 50u);
        EXPECT_EQ(he.stats().ops_completed, 50u);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace
}  // namespace cohort::testing::engine_groups_test
