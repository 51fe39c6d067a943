// Test support for cohort/torch: ranks as threads, each with its own shm
// communicator and Engine (tests/engine/engine_ranks.h), bound as the
// thread's engine so that cohort's tensor calls need no engine argument.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/torch/core/runtime.h"
#include "tests/engine/engine_ranks.h"

namespace cohort::testing {

// Runs fn(rank, size) on n rank threads with their engines bound.
inline void run_torch_ranks(int n, const std::function<void(int rank, int size)>& fn,
                            const engine::EngineOptions& options = engine_test_options()) {
  // One intra-op thread: the ranks are the parallelism, and results must not
  // depend on how a machine splits the work.
  torch::set_num_threads(1);
  run_engine_ranks(n, [&](EngineRank& info, engine::Engine& e) {
    cohort::EngineScope scope(e);
    fn(info.rank, info.size);
  }, options);
}

// What f() raised: what() of an E, "wrong error kind: what()" of another
// exception, "no error" when it returned.
template <typename E>
std::string error_of_kind(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong error kind: ") + e.what();
  }
  return "no error";
}

// What f() raised, which should be a ConfigError (error_of_kind's strings).
inline std::string config_error_of(const std::function<void()>& f) { return error_of_kind<ConfigError>(f); }

// Cross-entropy as fit()'s loss or a training step's: torch's own function
// has defaulted parameters, so it does not convert to a std::function.
inline at::Tensor cross_entropy(const at::Tensor& out, const at::Tensor& target) {
  return torch::cross_entropy_loss(out, target);
}

// Runs fn(rank) as run_torch_ranks does and returns each rank's error: ""
// when fn returned, what() of an E, "not a <E>: what()" of anything else.
template <typename E>
std::vector<std::string> run_torch_ranks_errors(int n, const std::function<void(int rank)>& fn) {
  torch::set_num_threads(1);
  auto errors = run_engine_ranks_collect(n, [&](EngineRank& info, engine::Engine& e) {
    cohort::EngineScope scope(e);
    fn(info.rank);
  });
  std::vector<std::string> out(static_cast<size_t>(n));
  for (size_t r = 0; r < out.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const E& expected) {
      out[r] = expected.what();
    } catch (...) {
      // Caught as std::exception in a try of its own: a handler after E's
      // would be dead code when E is std::exception (-Wexceptions).
      try {
        throw;
      } catch (const std::exception& other) {
        out[r] = std::string("not the expected error type: ") + other.what();
      }
    }
  }
  return out;
}

// A rank of run_world_ranks: its own world communicator (shm over the
// run's MemoryStore) and that store, no engine. For code that builds its own
// groups and engines from the world (Mesh).
struct WorldRank {
  int rank = 0;
  int size = 0;
  std::shared_ptr<rendezvous::Store> store;  // the job's store
  std::shared_ptr<comm::Communicator> world;
};

// Runs fn(rank-info) on n threads and returns each rank's exception (null
// when it succeeded). A throwing rank's communicators unwind with the
// exception, which aborts them for the other ranks.
inline std::vector<std::exception_ptr> run_world_ranks_collect(int n, const std::function<void(WorldRank&)>& fn) {
  torch::set_num_threads(1);
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        WorldRank info{r, n, store, nullptr};
        info.world = std::make_shared<comm::shm::Communicator>(
            std::make_shared<rendezvous::PrefixStore>("world", store), r, n, engine_comm_options());
        fn(info);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void run_world_ranks(int n, const std::function<void(WorldRank&)>& fn) {
  for (auto& e : run_world_ranks_collect(n, fn))
    if (e) std::rethrow_exception(e);
}

// Values every rank records, compared after the threads have joined (gtest
// assertions inside rank threads would not stop the other ranks).
template <typename T>
class PerRank {
 public:
  explicit PerRank(int n) : values_(size_t(n)) {}
  void add(int rank, T value) {
    std::lock_guard lock(mutex_);
    values_[size_t(rank)].push_back(std::move(value));
  }
  const std::vector<T>& of(int rank) const { return values_[size_t(rank)]; }

 private:
  std::mutex mutex_;
  std::vector<std::vector<T>> values_;
};

// Builds something from LibTorch's process-wide generator seeded with
// `seed`, atomically: ranks run as threads, and one rank's draws between
// another's seeding and its layers' initialisation would change that
// rank's initial weights.
template <typename Make>
auto seeded(uint64_t seed, Make make) {
  static std::mutex global_generator;
  std::lock_guard lock(global_generator);
  torch::manual_seed(seed);
  return make();
}

// All parameters of a module flattened into one float64 vector (a copy).
inline at::Tensor flat_parameters(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}).to(at::kDouble));
  return at::cat(parts);
}

// Exactly the parameters (same dtype), for bitwise comparisons.
inline std::vector<at::Tensor> copy_parameters(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type()) return false;
    if (std::memcmp(a[i].data_ptr(), b[i].data_ptr(), size_t(a[i].nbytes())) != 0) return false;
  }
  return true;
}

// The largest |a - b| / (|b| + floor) over the elements.
inline double max_relative_difference(const at::Tensor& a, const at::Tensor& b, double floor = 1e-6) {
  return ((a - b).abs() / (b.abs() + floor)).max().item<double>();
}

}  // namespace cohort::testing
