// Test support: ranks as threads, each with a hierarchical communicator over
// a gloo communicator on loopback, and a host key chosen per rank, so that
// host layouts (2 x 2, uneven, interleaved) are exercised in one process.
#pragma once

#include <unistd.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/gloo/communicator.h"
#include "cohort/comm/hierarchical/communicator.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::testing {

// host_of[r] is the host of rank r. Small chunks and a small "small message"
// bound make every path (chunks, slices, remainders) run on small buffers.
inline std::vector<std::exception_ptr> run_hierarchical_collect(
    const std::vector<int>& host_of, const std::function<void(int, comm::hierarchical::Communicator&)>& fn,
    size_t chunk_bytes = 16 * 1024, size_t small_bytes = 1024) {
  const int n = static_cast<int>(host_of.size());
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        comm::gloo::Options g;
        g.timeout = std::chrono::seconds(60);
        g.iface = "lo";
        auto flat = std::make_unique<comm::gloo::Communicator>(
            std::make_shared<rendezvous::PrefixStore>("flat", store), r, n, g);
        comm::hierarchical::Options h;
        h.host_key = "host" + std::to_string(host_of[r]);
        h.chunk_bytes = chunk_bytes;
        h.small_bytes = small_bytes;
        h.shm.timeout = std::chrono::seconds(60);
        h.shm.job_id = "hiertest" + std::to_string(::getpid());
        comm::hierarchical::Communicator c(std::move(flat), std::make_shared<rendezvous::PrefixStore>("local", store),
                                           h);
        fn(r, c);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void run_hierarchical(const std::vector<int>& host_of,
                             const std::function<void(int, comm::hierarchical::Communicator&)>& fn,
                             size_t chunk_bytes = 16 * 1024, size_t small_bytes = 1024) {
  for (auto& e : run_hierarchical_collect(host_of, fn, chunk_bytes, small_bytes))
    if (e) std::rethrow_exception(e);
}

}  // namespace cohort::testing
