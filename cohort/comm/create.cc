#include "cohort/comm/create.h"

#include <cstdlib>

#include "cohort/comm/shm/communicator.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::comm {

CommunicatorOptions options_from_env() {
  CommunicatorOptions o;
  o.backend = tunables::backend();
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(tunables::timeout_s() * 1000));
  if (const char* job = std::getenv("COHORT_JOB_ID"); job && *job) o.job_id = job;
  return o;
}

std::unique_ptr<Communicator> create_communicator(std::shared_ptr<rendezvous::Store> store, int rank,
                                                  int size, const CommunicatorOptions& options) {
  if (options.backend == "auto" || options.backend == "shm") {
    shm::Options o = shm::options_from_env();
    if (options.timeout.count() > 0) o.timeout = options.timeout;
    o.job_id = options.job_id;
    return std::make_unique<shm::Communicator>(std::move(store), rank, size, std::move(o));
  }
  COHORT_THROW(ConfigError) << "backend '" << options.backend
                            << "' is not available in this build (available: auto, shm)";
}

World init_world() {
  World world;
  world.info = rendezvous::discover();
  const auto& info = world.info;
  logging::set_rank(info.rank);
  CommunicatorOptions options = options_from_env();
  options.job_id = info.job_id;
  if (info.size > 1) {
    // shm is the only backend so far: it needs every rank on this host.
    COHORT_CHECK_AS(ConfigError, info.local_size == info.size)
        << "the job spans several hosts (local size " << info.local_size << " of " << info.size
        << "), but this build has only the single-host shm backend";
  }
  if (info.store_host.empty()) {
    COHORT_CHECK_AS(ConfigError, info.size == 1)
        << "no store address for a job of " << info.size
        << " ranks: set COHORT_STORE_ADDR or MASTER_ADDR/MASTER_PORT, or launch with cohortrun";
    world.store = std::make_shared<rendezvous::MemoryStore>();
  } else {
    if (info.store_in_rank0 && info.rank == 0) {
      world.store_server = std::make_shared<rendezvous::TcpStoreServer>(
          rendezvous::TcpStoreServerOptions{.host = "0.0.0.0", .port = info.store_port, .secret = info.secret});
    }
    world.store = std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{
        .host = info.store_host, .port = info.store_port, .secret = info.secret});
  }
  auto store = std::make_shared<rendezvous::PrefixStore>("world", world.store);
  world.comm = create_communicator(std::move(store), info.rank, info.size, options);
  return world;
}

}  // namespace cohort::comm
