// Test support: run a function on `n` ranks as threads, each with its own
// shm communicator over one MemoryStore, and rethrow the first failure.
#pragma once

#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/comm/shm/communicator.h"
#include "cohort/rendezvous/memory_store.h"

namespace cohort::testing {

inline comm::shm::Options test_options() {
  comm::shm::Options o;
  o.timeout = std::chrono::seconds(60);
  o.job_id = "test";
  return o;
}

// Runs fn(rank, comm) on n threads. Exceptions are collected per rank.
inline std::vector<std::exception_ptr> run_ranks_collect(
    int n, const std::function<void(int, comm::Communicator&)>& fn,
    const std::function<void(comm::shm::Options&)>& tweak = {}) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto o = test_options();
        if (tweak) tweak(o);
        comm::shm::Communicator c(store, r, n, o);
        fn(r, c);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void run_ranks(int n, const std::function<void(int, comm::Communicator&)>& fn,
                      const std::function<void(comm::shm::Options&)>& tweak = {}) {
  for (auto& e : run_ranks_collect(n, fn, tweak))
    if (e) std::rethrow_exception(e);
}

// The shared-memory segments of job `job` in /dev/shm.
inline std::vector<std::string> shm_segments_of(const std::string& job) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("cohort-" + job + "-", 0) == 0) found.push_back(e.path());
  return found;
}

}  // namespace cohort::testing
