// A rank of the cluster tests, started by cohortrun in the namespaces of an
// emulated cluster. It joins the job (init_world) and runs one scenario; its
// exit code is the verdict (0: the scenario held), its stdout says why.
//
//   cluster_rank_program collectives
//       prints "backend <name>" and "hosts <n>", checks every collective
//       against the float64 reference (tests/cluster/collective_checks.h),
//       including messages of several chunks, prints "ok".
//   cluster_rank_program cut <bound_s> <cut_host>
//       allreduces 1 Mi floats in a loop, printing "looping" once, until a
//       collective fails (the test cuts a host's link); prints "raised
//       <Kind> after <s> s: <message>" and exits 0 when a cohort error was
//       raised within <bound_s> of the start of the collective that failed,
//       or at all on <cut_host> (COHORT_HOST), whose ranks cannot even reach
//       the store to report (the test then checks what the others raised);
//       there it then waits to be stopped (cohortrun's host watch).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/comm/hierarchical/communicator.h"
#include "cohort/common/error.h"
#include "tests/cluster/collective_checks.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

const char* kind_of(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const PeerLostError*>(&e)) return "PeerLostError";
  if (dynamic_cast<const MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

int collectives(comm::Communicator& c) {
  std::printf("backend %s\n", c.backend().c_str());
  if (auto* h = dynamic_cast<comm::hierarchical::Communicator*>(&c))
    std::printf("hosts %d slices %d cross %s\n", h->topology().hosts, h->topology().min_local,
                h->cross_backend().c_str());
  std::fflush(stdout);
  std::string error = testing::check_every_collective(c, {.every_dtype_and_op = true});
  // Several 4 MiB chunks, slices and a remainder, across the shaped links.
  const size_t large = (size_t(9) << 20) / 4 + 3;
  if (error.empty()) error = testing::check_allreduce(c, DType::f32, ReduceOp::sum, large, true);
  if (error.empty()) error = testing::check_allreduce(c, DType::f32, ReduceOp::avg, large, false);
  if (error.empty()) error = testing::check_allreduce_identical(c, large);
  if (error.empty()) error = testing::check_broadcast(c, DType::f32, large, c.size() - 1);
  if (error.empty()) error = testing::check_allgather(c, DType::f32, large / 8);
  if (!error.empty()) {
    std::printf("wrong: %s\n", error.c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

int cut(comm::Communicator& c, double bound_s, const std::string& cut_host) {
  const char* host = std::getenv("COHORT_HOST");
  const bool on_cut_host = host && cut_host == host;
  std::vector<float> v(size_t(1) << 20, 1.0f);
  bool announced = false;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < give_up) {
    const auto start = Clock::now();
    try {
      c.allreduce(view_of(std::span(v)), {.op = ReduceOp::avg});
    } catch (const std::exception& e) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      const std::string kind = kind_of(e);
      std::printf("raised %s after %.2f s: %s\n", kind.c_str(), s, e.what());
      std::fflush(stdout);
      if (on_cut_host) {
        // A cut host stays cut: its ranks wait to be stopped, as on a host
        // that is down, so that cohortrun's host watch finds all of them.
        // (Ending here, a rank would race the watch: one that the cut finds
        // in the host's shm step raises there within the timeout, without
        // the store, and exits while its host peer still waits on the
        // store in its cross-host step; the watch then names that one
        // alone.)
        std::this_thread::sleep_until(give_up);
        return dynamic_cast<const Error*>(&e) ? 0 : 3;
      }
      return dynamic_cast<const Error*>(&e) && (s <= bound_s || on_cut_host) ? 0 : 3;
    }
    if (!announced) {
      std::printf("looping\n");
      std::fflush(stdout);
      announced = true;
    }
  }
  std::printf("no error within 120 s\n");
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const std::string scenario = argv[1];
  try {
    comm::World world = comm::init_world();
    if (scenario == "collectives") return collectives(*world.comm);
    if (scenario == "cut" && argc > 3) return cut(*world.comm, std::atof(argv[2]), argv[3]);
  } catch (const std::exception& e) {
    std::printf("error (%s): %s\n", kind_of(e), e.what());
    return 10;
  }
  return 64;
}
