#include "cohort/torch/core/runtime.h"

#include <cstdlib>
#include <mutex>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/dashboard/dashboard.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort {
namespace {

struct WorldRuntime {
  comm::World world;  // store, store server and (moved out) communicator
  engine::EngineOptions engine_options;
  std::shared_ptr<comm::Communicator> comm;
  // Shared with EngineRef's weak holds: a use in progress pins the object
  // (not the running engine: shutdown() stops that first).
  std::shared_ptr<engine::Engine> engine;
  // Rank 0's live dashboard under torchrun, mpirun or srun (COHORT_DASHBOARD;
  // cohortrun serves its own, --dashboard): destroyed first.
  std::unique_ptr<dashboard::Dashboard> dashboard;
};

std::mutex g_mutex;
std::unique_ptr<WorldRuntime> g_runtime;
bool g_was_shut_down = false;
bool g_joined = false;  // a joining process took the members' state (finish_joining)
thread_local engine::Engine* t_engine = nullptr;

const char* not_initialized() {
  return g_was_shut_down ? "cohort::shutdown() already ran (call cohort::init() again for a new world)"
                         : "cohort::init() has not been called";
}

WorldRuntime& world_or_throw() {
  COHORT_CHECK_AS(ConfigError, g_runtime != nullptr) << not_initialized();
  return *g_runtime;
}

// The engine over the world's communicator (collective). Engines number
// their generations in the store, so every world's can share the namespace.
void start_world_engine(WorldRuntime& runtime) {
  runtime.comm = std::shared_ptr<comm::Communicator>(std::move(runtime.world.comm));
  engine::EngineOptions options = runtime.engine_options;
  // This world's own check (its epoch), not one bound to a later world.
  if (!options.abandoned) options.abandoned = runtime.world.options.abandoned;
  runtime.engine = std::make_shared<engine::Engine>(
      runtime.comm, std::make_shared<rendezvous::PrefixStore>("engine/world", runtime.world.store), options);
}

}  // namespace

void init(InitOptions options) {
  std::lock_guard lock(g_mutex);
  COHORT_CHECK_AS(ConfigError, g_runtime == nullptr) << "cohort::init() called twice";
  auto runtime = std::make_unique<WorldRuntime>();
  runtime->world = comm::init_world();
  if (options.engine.label == "engine") options.engine.label = "world";
  // An elastic job recovers from a lost member as soon as it notices: a
  // rank whose ops wait on a member that died before submitting them wakes
  // the group this often (not 5 s), so the communicator's liveness check
  // runs. It costs one negotiation per period only while ops wait.
  if (runtime->world.info.elastic_slot >= 0 && options.engine.liveness_probe == engine::EngineOptions{}.liveness_probe)
    options.engine.liveness_probe = kElasticLivenessProbe;
  runtime->engine_options = options.engine;
  start_world_engine(*runtime);
  if (runtime->world.info.source != rendezvous::LaunchSource::cohortrun)
    runtime->dashboard =
        dashboard::start_dashboard_from_env(runtime->world.store, runtime->world.info.rank, runtime->world.info.size);
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
    if (runtime) g_was_shut_down = true;
  }
  if (!runtime) return;
  runtime->dashboard.reset();
  // Order matters: the engine uses the communicator, which uses the store,
  // which may be served by this rank. The engine is stopped here even when
  // an EngineRef pins the object for a use in progress.
  runtime->engine->shutdown();
  runtime->engine.reset();
  runtime->comm.reset();
  runtime.reset();
}

bool elastic() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.info.elastic_slot >= 0;
}

bool elastic_joining() {
  std::lock_guard lock(g_mutex);
  const rendezvous::LaunchInfo& info = world_or_throw().world.info;
  return info.elastic_slot >= 0 && info.elastic_joining && !g_joined;
}

void finish_joining() {
  std::lock_guard lock(g_mutex);
  g_joined = true;
}

int64_t membership_epoch() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.membership.epoch;
}

bool membership_changed() {
  std::shared_ptr<rendezvous::Store> store;
  int64_t epoch = -1;
  {
    std::lock_guard lock(g_mutex);
    const WorldRuntime& w = world_or_throw();
    if (w.world.info.elastic_slot < 0) return false;
    store = w.world.store;
    epoch = w.world.membership.epoch;
  }
  return rendezvous::latest_epoch(*store) > epoch;
}

std::function<std::optional<std::string>()> world_abandonment_check() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().world.options.abandoned;
}

std::optional<std::string> world_abandoned() {
  const auto abandoned = world_abandonment_check();
  return abandoned ? abandoned() : std::nullopt;
}

void reform() {
  std::lock_guard lock(g_mutex);
  WorldRuntime& w = world_or_throw();
  COHORT_CHECK_AS(ConfigError, w.world.info.elastic_slot >= 0)
      << "cohort::reform() is for elastic jobs (cohortrun --min-np); this one is of fixed size";
  // After a failure the engine has stopped itself (its ops failed with the
  // peer's loss) and shutdown() returns at once; after a graceful change
  // every member is here and it stops at one cycle. Either way the old
  // world's holders (EngineRef) now fail cleanly instead of using it.
  try {
    w.engine->shutdown();
  } catch (const Error&) {
  }
  w.engine.reset();
  w.comm.reset();
  try {
    comm::reform_world(w.world);
    start_world_engine(w);
  } catch (...) {
    // No world to go on in (the launcher ended the job, this process was
    // left out, the rendezvous failed): as after shutdown(), every later
    // use says so instead of reaching a missing engine.
    g_runtime.reset();
    g_was_shut_down = true;
    throw;
  }
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

std::string world_backend() {
  std::lock_guard lock(g_mutex);
  return world_or_throw().comm->backend();
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
    // A communicator of an elastic world gives up with it (a lost member).
    options.elastic = w.world.options.elastic;
    options.abandoned = w.world.options.abandoned;
  }
  return comm::create_communicator(std::make_shared<rendezvous::PrefixStore>(name, store), rank, size, options);
}

engine::Engine& current_engine() {
  if (t_engine) return *t_engine;
  std::lock_guard lock(g_mutex);
  COHORT_CHECK_AS(ConfigError, g_runtime != nullptr)
      << "no engine: " << not_initialized() << "; call cohort::init(), bind one with cohort::EngineScope, "
      << "or pass one in the options";
  return *g_runtime->engine;
}

engine::Engine& resolve_engine(engine::Engine* explicit_engine) {
  return explicit_engine ? *explicit_engine : current_engine();
}

EngineRef::EngineRef(engine::Engine* explicit_engine, std::string holder) : holder_(std::move(holder)) {
  std::lock_guard lock(g_mutex);
  engine::Engine* target = explicit_engine ? explicit_engine : t_engine;
  if (g_runtime && (!target || target == g_runtime->engine.get())) {
    world_ = g_runtime->engine;
    target = g_runtime->engine.get();
  } else {
    COHORT_CHECK_AS(ConfigError, target != nullptr)
        << holder_ << ": no engine: " << not_initialized()
        << "; call cohort::init(), bind one with cohort::EngineScope, or pass one in the options";
    borrowed_ = target;
  }
  rank_ = target->rank();
  size_ = target->size();
}

std::shared_ptr<engine::Engine> EngineRef::lock() const {
  if (borrowed_) return std::shared_ptr<engine::Engine>(std::shared_ptr<void>(), borrowed_);  // not owned
  std::shared_ptr<engine::Engine> engine = world_.lock();
  COHORT_CHECK_AS(ConfigError, engine != nullptr)
      << holder_ << " was used after cohort::shutdown() destroyed the engine it runs on (or, in an elastic job, "
      << "cohort::reform() replaced it with a new world's); destroy it (or finish using it) before, and build a "
      << "new one after";
  return engine;
}

EngineScope::EngineScope(engine::Engine& engine) : previous_(t_engine) { t_engine = &engine; }
EngineScope::~EngineScope() { t_engine = previous_; }

}  // namespace cohort
