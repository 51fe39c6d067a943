// A rank of the process tests: joins the world from the launcher variables
// (init_world) and runs one scenario. Exit 0 means the scenario held.
//   shm_rank_program collectives        every collective, checked
//   shm_rank_program die <victim>       <victim> SIGKILLs itself before an
//                                       allreduce; the others must raise
//                                       PeerLostError naming it within 5 s
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/error.h"

using namespace cohort;

namespace {

int collectives(comm::Communicator& c) {
  const int n = c.size(), r = c.rank();
  // Allreduce large enough to pipeline through the slots, float64 reference.
  const size_t count = (size_t(1) << 20) + 5;
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float((i * 7 + r) % 11);
  c.allreduce(view_of(std::span(v)));
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int p = 0; p < n; ++p) want += double((i * 7 + p) % 11);
    if (v[i] != want) {
      std::fprintf(stderr, "allreduce wrong at %zu: %f vs %f\n", i, v[i], want);
      return 1;
    }
  }
  std::vector<int64_t> ranks(n), mine{r};
  c.allgather(view_of(std::span(mine)), view_of(std::span(ranks)));
  for (int p = 0; p < n; ++p)
    if (ranks[p] != p) return 2;
  std::vector<double> b(100000, r == 0 ? 3.5 : 0.0);
  c.broadcast(view_of(std::span(b)), 0);
  for (double x : b)
    if (x != 3.5) return 3;
  c.barrier();
  return 0;
}

int die(comm::Communicator& c, int victim) {
  std::vector<float> v(1 << 16, 1.0f);
  c.allreduce(view_of(std::span(v)));
  if (c.rank() == victim) {
    std::fflush(nullptr);
    kill(getpid(), SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) c.allreduce(view_of(std::span(v)));
    std::fprintf(stderr, "rank %d: no error after the victim died\n", c.rank());
    return 1;
  } catch (const PeerLostError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %d raised after %.3f s: %s\n", c.rank(), s, e.what());
    const bool named = std::string(e.what()).find("rank " + std::to_string(victim)) != std::string::npos;
    return named && s < 5.0 ? 0 : 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: wrong error: %s\n", c.rank(), e.what());
    return 5;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  try {
    comm::World world = comm::init_world();
    const std::string scenario = argv[1];
    if (scenario == "collectives") return collectives(*world.comm);
    if (scenario == "die" && argc > 2) return die(*world.comm, std::atoi(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 10;
  }
  return 64;
}
