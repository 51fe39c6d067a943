// Test support: run a function on `n` ranks as threads, each with its own
// gloo communicator (real TCP connections on the loopback interface) over
// one MemoryStore, and collect or rethrow the failures.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/comm/gloo/communicator.h"
#include "cohort/rendezvous/memory_store.h"

namespace cohort::testing {

inline comm::gloo::Options gloo_test_options() {
  comm::gloo::Options o;
  o.timeout = std::chrono::seconds(60);
  o.iface = "lo";
  return o;
}

// Runs fn(rank, comm) on n threads. Exceptions are collected per rank.
inline std::vector<std::exception_ptr> run_gloo_ranks_collect(
    int n, const std::function<void(int, comm::Communicator&)>& fn,
    const std::function<void(int, comm::gloo::Options&)>& tweak = {}) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto o = gloo_test_options();
        if (tweak) tweak(r, o);
        comm::gloo::Communicator c(store, r, n, o);
        fn(r, c);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void run_gloo_ranks(int n, const std::function<void(int, comm::Communicator&)>& fn,
                           const std::function<void(int, comm::gloo::Options&)>& tweak = {}) {
  for (auto& e : run_gloo_ranks_collect(n, fn, tweak))
    if (e) std::rethrow_exception(e);
}

}  // namespace cohort::testing
