// A rank of the process tests: joins the world from the launcher variables
// (init_world) and runs one scenario. Exit 0 means the scenario held.
//   shm_rank_program collectives        every collective, checked
//   shm_rank_program die <victim>       <victim> SIGKILLs itself before an
//                                       allreduce; the others must raise
//                                       PeerLostError whose rank() and
//                                       message name it
//   shm_rank_program leave-early        the last rank gathers to rank 0 and
//                                       exits while rank 1 has not gathered
//                                       yet; rank 0 must gather everything
//   shm_rank_program die-recording <victim> kill|stop
//                                       <victim> finds a mismatch the others
//                                       cannot see and is SIGKILLed (or
//                                       stopped) after claiming the abort
//                                       record; the others must raise
//                                       PeerLostError naming it
//   shm_rank_program lone               init_world with no handler around it
//                                       (a rank whose peers never start
//                                       ends with an uncaught exception)
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/create.h"
#include "cohort/comm/shm/test_hooks.h"
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

// Exit 0 when `e` is a PeerLostError that names `victim` in rank() and text.
int names_victim(const comm::Communicator& c, const std::exception& e, int victim, double seconds) {
  const auto* lost = dynamic_cast<const PeerLostError*>(&e);
  if (!lost) {
    std::fprintf(stderr, "rank %d: wrong error: %s\n", c.rank(), e.what());
    return 5;
  }
  std::printf("rank %d raised after %.3f s, rank() %d: %s\n", c.rank(), seconds, lost->rank(), e.what());
  const bool named = std::string(e.what()).find("rank " + std::to_string(victim) + " ") != std::string::npos;
  return named && lost->rank() == victim ? 0 : 4;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
  } catch (const std::exception& e) {
    return names_victim(c, e, victim, seconds_since(start));
  }
}

// The last rank's part of a gather only writes: it is done as soon as it has
// published, and exits. Rank 1 gathers only once that process is gone, so
// rank 0, waiting for rank 1, probes while a peer that provided everything
// asked of it has left.
int leave_early(comm::World& world) {
  comm::Communicator& c = *world.comm;
  const int n = c.size(), r = c.rank();
  std::vector<int64_t> mine(1000, r), all(r == 0 ? mine.size() * n : 0);
  if (r == n - 1) world.store->set("test/leaver", std::to_string(getpid()));
  if (r == 1) {
    const pid_t leaver = std::stoi(world.store->get("test/leaver", std::chrono::seconds(60)));
    pollfd exited{static_cast<int>(syscall(SYS_pidfd_open, leaver, 0)), POLLIN, 0};
    if (exited.fd < 0 || poll(&exited, 1, 60000) != 1) return 6;
    // A few probe intervals (COHORT_PEER_CHECK_MS) for rank 0 to probe in.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  c.gather(view_of(std::span(mine)), view_of(std::span(all)), 0);
  if (r == 0)
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i] != int64_t(i / mine.size())) return 7;
  return 0;
}

// The victim calls a broadcast with another count than the root's: only it
// compares the root's signature with its own (the root only writes, the
// other receivers match), so only it fails, and it dies (or stops) holding
// a claimed but unwritten abort record. The others wait for it in a barrier.
int die_recording(comm::Communicator& c, int victim, bool stop) {
  std::vector<float> v(16, 1.0f);
  c.allreduce(view_of(std::span(v)));
  if (c.rank() == victim) {
    comm::shm::test_hooks::after_abort_claim = stop ? [] { raise(SIGSTOP); } : [] { raise(SIGKILL); };
    v.resize(5);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    c.broadcast(view_of(std::span(v)), victim == 0 ? 1 : 0);
    c.barrier();
    std::fprintf(stderr, "rank %d: no error\n", c.rank());
    return 1;
  } catch (const std::exception& e) {
    return names_victim(c, e, victim, seconds_since(start));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const std::string scenario = argv[1];
  if (scenario == "lone") {
    comm::init_world();  // throws, and nothing catches it: the peers never start
    return 1;
  }
  try {
    comm::World world = comm::init_world();
    if (scenario == "collectives") return collectives(*world.comm);
    if (scenario == "die" && argc > 2) return die(*world.comm, std::atoi(argv[2]));
    if (scenario == "leave-early") return leave_early(world);
    if (scenario == "die-recording" && argc > 3)
      return die_recording(*world.comm, std::atoi(argv[2]), std::string(argv[3]) == "stop");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 10;
  }
  return 64;
}
