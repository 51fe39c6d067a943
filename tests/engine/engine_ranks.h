// Test support: ranks as threads, each with its own shm communicator over one
// MemoryStore and its own Engine on a shared namespace of that store.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/shm/communicator.h"
#include "cohort/common/error.h"
#include "cohort/engine/engine.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::testing {

inline comm::shm::Options engine_comm_options() {
  comm::shm::Options o;
  // Generous: a loaded 2-core machine runs up to 4 ranks and their engines.
  o.timeout = std::chrono::seconds(120);
  o.job_id = "enginetest";
  return o;
}

// Engine options for tests: nothing from the environment that would change
// behaviour (no timeline, no stall inspector unless a test asks).
inline engine::EngineOptions engine_test_options() {
  engine::EngineOptions o;
  o.linger = std::chrono::microseconds(300);
  o.stall_warning_s = 0;
  o.stall_shutdown_s = 0;
  o.timeline_path = "";
  return o;
}

// engine_test_options() with the autotuner on, its trials written to `log`
// ("": nowhere).
inline engine::EngineOptions autotune_test_options(std::string log = "") {
  engine::EngineOptions o = engine_test_options();
  o.autotune = 1;
  o.autotune_log = std::move(log);
  return o;
}

struct EngineRank {
  int rank = 0;
  int size = 0;
  std::shared_ptr<rendezvous::Store> store;  // the job's store (not the engine's namespace)
  std::shared_ptr<comm::Communicator> comm;
};

// Runs fn(rank-info, engine) on n threads. Each rank's engine is destroyed
// (collective shutdown) after fn returns; an exception from fn is collected
// and the engine is then destroyed during unwinding (which aborts it).
inline std::vector<std::exception_ptr> run_engine_ranks_collect(
    int n, const std::function<void(EngineRank&, engine::Engine&)>& fn,
    const engine::EngineOptions& options = engine_test_options()) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        EngineRank info{r, n, store, nullptr};
        info.comm = std::make_shared<comm::shm::Communicator>(std::make_shared<rendezvous::PrefixStore>("comm", store),
                                                              r, n, engine_comm_options());
        engine::Engine e(info.comm, std::make_shared<rendezvous::PrefixStore>("engine", store), options);
        fn(info, e);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void run_engine_ranks(int n, const std::function<void(EngineRank&, engine::Engine&)>& fn,
                             const engine::EngineOptions& options = engine_test_options()) {
  for (auto& e : run_engine_ranks_collect(n, fn, options))
    if (e) std::rethrow_exception(e);
}

// The message of the error a handle fails with ("" when it succeeds).
inline std::string error_of(const engine::Handle& h) {
  try {
    h.wait();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Polls `pred` until it holds or `limit` passes (generous limits only: this
// waits for an event, it does not measure time).
inline bool eventually(const std::function<bool()>& pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// CPU time (user + system) this process has used.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace cohort::testing
