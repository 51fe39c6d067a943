#include "cohort/torch/core/runtime.h"

#include <cstdlib>
#include <mutex>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort {
namespace {

struct WorldRuntime {
  comm::World world;  // store, store server and (moved out) communicator
  std::shared_ptr<comm::Communicator> comm;
  std::unique_ptr<engine::Engine> engine;
};

std::mutex g_mutex;
std::unique_ptr<WorldRuntime> g_runtime;
thread_local engine::Engine* t_engine = nullptr;

WorldRuntime& world_or_throw() {
  COHORT_CHECK_AS(ConfigError, g_runtime != nullptr)
      << "cohort::init() has not been called (or shutdown() already ran)";
  return *g_runtime;
}

}  // namespace

void init(InitOptions options) {
  std::lock_guard lock(g_mutex);
  COHORT_CHECK_AS(ConfigError, g_runtime == nullptr) << "cohort::init() called twice";
  auto runtime = std::make_unique<WorldRuntime>();
  runtime->world = comm::init_world();
  runtime->comm = std::shared_ptr<comm::Communicator>(std::move(runtime->world.comm));
  if (options.engine.label == "engine") options.engine.label = "world";
  runtime->engine = std::make_unique<engine::Engine>(
      runtime->comm, std::make_shared<rendezvous::PrefixStore>("engine/world", runtime->world.store),
      options.engine);
  g_runtime = std::move(runtime);
  // A program that returns from main() without shutdown() still stops its
  // engine collectively instead of leaving the other ranks waiting for it.
  static const bool registered = [] { return std::atexit([] { shutdown(); }) == 0; }();
  (void)registered;
}

void shutdown() {
  std::unique_ptr<WorldRuntime> runtime;
  {
    std::lock_guard lock(g_mutex);
    runtime = std::move(g_runtime);
  }
  if (!runtime) return;
  // Order matters: the engine uses the communicator, which uses the store,
  // which may be served by this rank.
  runtime->engine.reset();
  runtime->comm.reset();
  runtime.reset();
}

bool initialized() {
  std::lock_guard lock(g_mutex);
  return g_runtime != nullptr;
}

int rank() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.info.rank;
}
int size() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.info.size;
}
int local_rank() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.info.local_rank;
}
int local_size() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.info.local_size;
}

std::shared_ptr<rendezvous::Store> world_store() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.store;
}

std::unique_ptr<comm::Communicator> create_world_communicator(const std::string& name) {
  std::shared_ptr<rendezvous::Store> store;
  comm::CommunicatorOptions options = comm::options_from_env();
  int rank = 0, size = 0;
  {
    std::lock_guard lock(g_mutex);
    const WorldRuntime& w = world_or_throw();
    store = w.world.store;
    const auto& info = w.world.info;
    rank = info.rank;
    size = info.size;
    // The world's own backend, not a fresh "auto" choice: the same one the
    // job already runs on (init_world may have declined MPI).
    options.backend = w.comm->backend();
    options.job_id = info.job_id;
    options.launch_source = info.source;
    options.all_local = info.local_size == info.size;
    options.store_host = info.store_host;
  }
  return comm::create_communicator(std::make_shared<rendezvous::PrefixStore>(name, store), rank, size, options);
}

engine::Engine& current_engine() {
  if (t_engine) return *t_engine;
  std::lock_guard lock(g_mutex);
  COHORT_CHECK_AS(ConfigError, g_runtime != nullptr)
      << "no engine: call cohort::init() first, bind one with cohort::EngineScope, "
         "or pass one in the options";
  return *g_runtime->engine;
}

engine::Engine& resolve_engine(engine::Engine* explicit_engine) {
  return explicit_engine ? *explicit_engine : current_engine();
}

EngineScope::EngineScope(engine::Engine& engine) : previous_(t_engine) { t_engine = &engine; }
EngineScope::~EngineScope() { t_engine = previous_; }

}  // namespace cohort
