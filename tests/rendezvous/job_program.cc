// A rank of the registration tests: joins its job from the launcher's
// variables (init_world), then runs STEPS engine allreduces, each of
// (rank + step) summed over the ranks and checked against the closed form,
// sleeping SLEEP_MS between them. NAME (default "step") names the op: ranks
// given different names stall.
//
//   rendezvous_job_program STEPS SLEEP_MS [NAME]
//
// Prints "joined" once in the job and "finished" at the end. Exit 0: every
// sum was right; 3: a wrong sum; 10: ConfigError; 13: TimeoutError; 11:
// another cohort error; 12: anything else. Errors are printed on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/common/error.h"
#include "cohort/engine/engine.h"
#include "cohort/rendezvous/prefix_store.h"

using namespace cohort;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return 64;
  const int steps = std::atoi(argv[1]);
  const int sleep_ms = std::atoi(argv[2]);
  const std::string name = argc == 4 ? argv[3] : "step";
  try {
    comm::World world = comm::init_world();
    const int rank = world.comm->rank(), size = world.comm->size();
    std::shared_ptr<comm::Communicator> comm = std::move(world.comm);
    engine::Engine engine(comm, std::make_shared<rendezvous::PrefixStore>("engine", world.store));
    std::printf("joined\n");
    std::fflush(stdout);
    for (int step = 0; step < steps; ++step) {
      std::vector<double> v(16, double(rank + step));
      engine.allreduce_async(name, view_of(std::span(v))).wait();
      // sum over ranks r of (r + step)
      const double want = double(size) * (size - 1) / 2 + double(size) * step;
      for (double x : v)
        if (x != want) {
          std::fprintf(stderr, "rank %d step %d: sum %g, expected %g\n", rank, step, x, want);
          return 3;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    engine.shutdown();
    std::printf("finished\n");
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "config error: %s\n", e.what());
    return 10;
  } catch (const TimeoutError& e) {
    std::fprintf(stderr, "timeout: %s\n", e.what());
    return 13;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 11;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exception: %s\n", e.what());
    return 12;
  }
}
