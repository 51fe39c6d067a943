#include "cohort/comm/create.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "cohort/comm/shm/communicator.h"
#include "cohort/common/check.h"
#include "cohort/common/host_key.h"
#include "cohort/common/logging.h"
#include "cohort/common/network_interface.h"
#include "cohort/common/tunables.h"
#include "cohort/rendezvous/epoch_store.h"
#include "cohort/rendezvous/heartbeat.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/registration.h"
#include "cohort/rendezvous/tcp_store.h"

#ifdef COHORT_HAVE_GLOO
#include "cohort/comm/gloo/communicator.h"
#include "cohort/comm/hierarchical/communicator.h"  // issue 5 item 3: hierarchical over gloo
#endif
#ifdef COHORT_HAVE_MPI
#include "cohort/comm/mpi/communicator.h"
#include "cohort/comm/mpi/store_bootstrap.h"
#endif

namespace cohort::comm {
namespace {

std::string available_text() {
  std::string text;
  for (const auto& b : available_backends()) text += (text.empty() ? "" : ", ") + b;
  return text;
}

// The shared store: rank 0 serves it when the launcher does not.
void connect_store(World& world) {
  const auto& info = world.info;
  if (info.store_host.empty()) {
    COHORT_CHECK_AS(ConfigError, info.size == 1)
        << "no store address for a job of " << info.size
        << " ranks: set COHORT_STORE_ADDR or MASTER_ADDR/MASTER_PORT, or launch with cohortrun";
    world.store = std::make_shared<rendezvous::MemoryStore>();
    return;
  }
  if (info.store_in_rank0 && info.rank == 0 && !world.store_server) {
    world.store_server = std::make_shared<rendezvous::TcpStoreServer>(rendezvous::TcpStoreServerOptions{
        .host = info.store_bind, .port = info.store_port, .secret = info.secret});
  }
  // A launcher's store (cohortrun's) listens before any rank starts: a
  // refused connection there is final, not a store still starting.
  world.store =
      std::make_shared<rendezvous::TcpStore>(rendezvous::TcpStoreOptions{.host = info.store_host,
                                                                         .port = info.store_port,
                                                                         .secret = info.secret,
                                                                         .server_listening = !info.store_in_rank0});
  // Before anything else: a process of another job must not take a seat.
  // An elastic job's seats pass from process to process; its membership
  // (published by its launcher) says who is in the world.
  if (info.elastic_slot < 0)
    rendezvous::register_rank(*world.store, info,
                              "store at " + info.store_host + ":" + std::to_string(info.store_port));
}

// How long a member waits for the launcher's next epoch: the launcher ends
// the job itself (--elastic-timeout) and says so through the store.
constexpr std::chrono::hours kMembershipWait{24};

rendezvous::Member me(const World& world) {
  return {world.info.elastic_slot, world.info.elastic_incarnation};
}

// The world of `world.membership`: this process's rank in it, and a
// communicator under the epoch's own namespace (shm and gloo need a fresh
// one per group).
void join_epoch(World& world) {
  const int rank = world.membership.rank_of(me(world));
  COHORT_CHECK(rank >= 0) << "not a member of epoch " << world.membership.epoch;
  world.info.rank = rank;
  world.info.size = world.membership.size();
  // Members on this member's host, in rank order (no hosts recorded: the
  // job runs on one host).
  const std::vector<std::string>& hosts = world.membership.hosts;
  world.info.local_rank = rank;
  world.info.local_size = world.info.size;
  if (!hosts.empty()) {
    const std::string& mine = hosts[size_t(rank)];
    world.info.local_rank = int(std::count(hosts.begin(), hosts.begin() + rank, mine));
    world.info.local_size = int(std::count(hosts.begin(), hosts.end(), mine));
  }
  world.options.all_local = world.info.local_size == world.info.size;
  world.options.elastic = true;
  logging::set_rank(rank);
  // Armed while the world forms: a member lost meanwhile makes the launcher
  // publish a later epoch, and the rendezvous gives way to it.
  auto store = std::make_shared<rendezvous::EpochStore>(world.store, world.membership.epoch);
  // A member lost without closing its connections (a cut link, a hung
  // host) would hold the others in a collective until COHORT_TIMEOUT_S:
  // once the launcher says so, the world is abandoned at once.
  world.options.abandoned = [root = world.store, epoch = world.membership.epoch]() -> std::optional<std::string> {
    const std::optional<std::string> lost = rendezvous::lost_member(*root, epoch);
    if (!lost) return std::nullopt;
    return "member " + *lost + " of elastic epoch " + std::to_string(epoch) +
           " was lost (cohortrun saw it fail or go silent)";
  };
  world.comm = create_communicator(store, rank, world.info.size, world.options);
  // Every member's communicator is whole (a backend's inner groups, as the
  // hierarchical one's per host, may still be forming when this rank's
  // returns): only then is the epoch formed and the store disarmed.
  world.comm->barrier();
  store->disarm();
  // Every member is past reading the epoch: the launcher may admit others.
  if (rank == 0) rendezvous::announce_formed(*world.store, world.membership.epoch);
}

// Heartbeats as `beater` until the process exits, whatever becomes of its
// worlds: a member done with training that lingers (writing its results) is
// not silent (rendezvous/heartbeat.h). An elastic job's process beats as
// its slot's incarnation, a multi-host job's rank (COHORT_HEARTBEAT=1, for
// cohortrun's host watch) as incarnation 0 of its rank.
void keep_beating(const World& world, rendezvous::Member beater) {
  static std::unique_ptr<rendezvous::Heartbeat> heartbeat;
  if (heartbeat) return;
  const int64_t period_ms = tunables::elastic_heartbeat_ms();
  COHORT_CHECK_AS(ConfigError, period_ms > 0) << "COHORT_ELASTIC_HEARTBEAT_MS=" << period_ms << " must be positive";
  heartbeat = std::make_unique<rendezvous::Heartbeat>(world.store, beater, std::chrono::milliseconds(period_ms));
}

// How long a member whose new world broke while forming waits for the
// launcher's next epoch before the failure is its own.
constexpr std::chrono::seconds kLostMemberGrace{10};

// Whether the launcher publishes an epoch after the world's within `grace`
// (MembershipEnded when it ends the job instead).
bool later_epoch_within(World& world, std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    rendezvous::throw_if_ended(*world.store);
    if (rendezvous::latest_epoch(*world.store) > world.membership.epoch) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The world of the latest epoch after `after` that has this process (after
// < 0: the first it joins). An epoch superseded while its world formed (a
// member lost in the meantime) gives way to the next; ElasticLeave when an
// epoch leaves this member out.
void join_next_epoch(World& world, int64_t after) {
  for (;;) {
    world.membership = rendezvous::wait_for_membership(*world.store, me(world), after, kMembershipWait);
    if (world.membership.rank_of(me(world)) < 0)
      throw ElasticLeave("member " + rendezvous::member_text(me(world)) + " is not in epoch " +
                         std::to_string(world.membership.epoch) + ": it leaves the job");
    try {
      join_epoch(world);
      return;
    } catch (const rendezvous::EpochSuperseded& e) {
      COHORT_LOG(warn) << "elastic: " << e.what() << "; joining the next";
    } catch (const PeerLostError& e) {
      // A member that died after reaching the rendezvous breaks connections
      // instead, at once (its kernel closes them), before the launcher has
      // seen it die: its later epoch says it is gone, within a grace.
      if (!later_epoch_within(world, kLostMemberGrace)) throw;
      COHORT_LOG(warn) << "elastic: epoch " << world.membership.epoch << " lost a member while its world formed ("
                       << e.what() << "); joining the next";
    }
    world.comm.reset();
    after = world.membership.epoch;
  }
}

// The number of hosts the ranks run on, by the host key that the backend's
// choice groups them by (cohortrun's -H hosts; machines that share a name
// count apart). Collective, and made by every rank whether or not the
// banner is wanted: ranks may not agree on COHORT_BANNER. Returns the count
// on rank 0, 0 elsewhere.
int count_hosts(Communicator& comm) {
  int64_t mine = static_cast<int64_t>(net::host_key_hash(net::host_key()));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.gather(BufferView{&mine, 1, DType::i64}, BufferView{all.data(), all.size(), DType::i64}, 0);
  if (comm.rank() != 0) return 0;
  std::sort(all.begin(), all.end());
  return static_cast<int>(std::unique(all.begin(), all.end()) - all.begin());
}

// The line rank 0 prints once the world exists: which backend was chosen,
// for how many ranks on how many hosts, where the store is and who started
// the job. COHORT_BANNER=0 silences it.
void announce(const World& world) {
  const int hosts = count_hosts(*world.comm);
  if (world.info.rank != 0 || !tunables::banner()) return;
  const auto& info = world.info;
  std::string line = "cohort: backend " + world.comm->backend() + ", " + std::to_string(info.size) +
                     (info.size == 1 ? " rank" : " ranks") + " on " + std::to_string(hosts) +
                     (hosts == 1 ? " host" : " hosts") + ", ";
  line += info.store_host.empty() ? std::string("no store")
                                  : "store " + info.store_host + ":" + std::to_string(info.store_port);
  line += std::string(", started by ") + rendezvous::launch_source_name(info.source);
  if (info.source == rendezvous::LaunchSource::single) line += " (no launcher: cohortrun -np N runs N ranks)";
  line += "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

#ifdef COHORT_HAVE_MPI
// Started by mpirun or srun, in discovery's order of precedence: cohortrun's
// and torchrun's variables win over MPI's.
std::optional<rendezvous::LaunchSource> mpi_launch(const rendezvous::Environment& env) {
  auto has = [&](const char* v) {
    auto it = env.find(v);
    return it != env.end() && !it->second.empty();
  };
  if (has("COHORT_RANK") || has("RANK")) return std::nullopt;
  if (has("OMPI_COMM_WORLD_RANK")) return rendezvous::LaunchSource::openmpi;
  // A task of an srun step (sbatch's batch script has SLURM_PROCID too) that
  // srun gave a PMIx server (--mpi=pmix, or MpiDefault=pmix): without one,
  // OpenMPI's MPI_Init aborts the process ("OMPI was not built with SLURM's
  // PMI support"), so the job goes without MPI, through the store.
  if (has("SLURM_PROCID") && (has("SLURM_STEP_ID") || has("SLURM_STEPID")) && has("PMIX_RANK"))
    return rendezvous::LaunchSource::slurm;
  return std::nullopt;
}

// The job under MPI, or nullopt (backend auto) when MPI's world is not the
// job (srun without an MPI plugin gives every task a world of one).
std::optional<World> init_mpi_world(rendezvous::Environment env, rendezvous::LaunchSource source,
                                    const CommunicatorOptions& options) {
  mpi::Options mo = mpi::options_from_env();
  if (options.timeout.count() > 0) mo.timeout = options.timeout;
  auto comm = std::make_unique<mpi::Communicator>(std::move(mo));
  auto number = [&](const char* v) { return env.count(v) ? std::atoi(env.at(v).c_str()) : -1; };
  const int expected = source == rendezvous::LaunchSource::openmpi ? number("OMPI_COMM_WORLD_SIZE")
                                                                   : number("SLURM_NTASKS");
  if (expected > 0 && comm->size() != expected) {
    COHORT_CHECK_AS(ConfigError, options.backend != "mpi")
        << "COHORT_BACKEND=mpi, but MPI's world has " << comm->size() << " ranks where the launcher started "
        << expected << " (srun needs --mpi=pmix or pmi2)";
    COHORT_LOG(warn) << "MPI's world has " << comm->size() << " ranks, the launcher started " << expected
                     << "; not using MPI";
    return std::nullopt;
  }
  World world;
  const bool configured = env.count("COHORT_STORE_ADDR") || env.count("MASTER_ADDR") || env.count("MASTER_PORT");
  if (!configured && comm->size() > 1) {
    const bool all_local = source == rendezvous::LaunchSource::openmpi
                               ? number("OMPI_COMM_WORLD_LOCAL_SIZE") == comm->size()
                               : number("SLURM_JOB_NUM_NODES") == 1;
    auto store = mpi::bootstrap_store(*comm, all_local);
    env["COHORT_STORE_ADDR"] = store.host + ":" + std::to_string(store.port);
    env["COHORT_SECRET"] = store.secret;
    world.store_server = std::move(store.server);
  }
  world.info = rendezvous::discover(env);
  COHORT_CHECK_AS(ConfigError, world.info.rank == comm->rank() && world.info.size == comm->size())
      << "the launcher says rank " << world.info.rank << " of " << world.info.size << ", MPI says rank "
      << comm->rank() << " of " << comm->size();
  logging::set_rank(world.info.rank);
  connect_store(world);
  world.comm = std::move(comm);
  announce(world);
  return world;
}
#endif

}  // namespace

CommunicatorOptions options_from_env() {
  CommunicatorOptions o;
  o.backend = tunables::backend();
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(tunables::timeout_s() * 1000));
  if (const char* job = std::getenv("COHORT_JOB_ID"); job && *job) o.job_id = job;
  o.iface = tunables::iface();
  return o;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> b{"shm"};
#ifdef COHORT_HAVE_GLOO
  b.push_back("gloo");
  b.push_back("hierarchical");  // issue 5 item 3: shm inside hosts, gloo across them
#endif
#ifdef COHORT_HAVE_MPI
  b.push_back("mpi");
#endif
  return b;
}

std::string resolve_backend(const CommunicatorOptions& options) {
  const std::string& b = options.backend;
  if (b == "auto") {
    const bool mpi_launched = options.launch_source == rendezvous::LaunchSource::openmpi ||
                              options.launch_source == rendezvous::LaunchSource::slurm;
#ifdef COHORT_HAVE_MPI
    if (mpi_launched) return "mpi";
#endif
    (void)mpi_launched;
    if (options.all_local) return "shm";
#ifdef COHORT_HAVE_GLOO
    // --- issue 5 item 3: ranks span hosts: shm inside each, gloo between.
    return "hierarchical";
#else
    COHORT_THROW(ConfigError) << "the ranks span several hosts, but this build has only the single-host "
                              << "backends (" << available_text()
                              << "): install libgloo-dev (scripts/bootstrap.sh) and reconfigure";
#endif
  }
  for (const auto& known : available_backends())
    if (b == known) return b;
  if (b == "shm" || b == "gloo" || b == "mpi" || b == "hierarchical")
    COHORT_THROW(ConfigError) << "backend '" << b << "' is not available in this build (available: auto, "
                              << available_text() << "); install its package (scripts/bootstrap.sh) and reconfigure";
  COHORT_THROW(ConfigError) << "unknown backend '" << b << "' (COHORT_BACKEND): expected auto, "
                            << available_text();
}

#ifdef COHORT_HAVE_GLOO
namespace {

// The gloo communicator's options (also the hierarchical backend's cross-host
// part).
gloo::Options gloo_options(const CommunicatorOptions& options) {
  gloo::Options o = gloo::options_from_env();
  if (options.timeout.count() > 0) o.timeout = options.timeout;
  // Where it listens: net::listen_choice, which `cohortrun --check` judges.
  net::ListenChoice listen = net::listen_choice(options.iface, options.all_local, options.store_host);
  o.iface = std::move(listen.iface);
  o.hostname = std::move(listen.address);
  if (options.elastic) o.failure_grace = std::min(o.failure_grace, kElasticFailureGrace);
  o.abandoned = options.abandoned;
  return o;
}

}  // namespace
#endif

std::unique_ptr<Communicator> create_communicator(std::shared_ptr<rendezvous::Store> store, int rank,
                                                  int size, const CommunicatorOptions& options) {
  const std::string backend = resolve_backend(options);
  if (backend == "shm") {
    shm::Options o = shm::options_from_env();
    if (options.timeout.count() > 0) o.timeout = options.timeout;
    o.job_id = options.job_id;
    o.abandoned = options.abandoned;
    return std::make_unique<shm::Communicator>(std::move(store), rank, size, std::move(o));
  }
#ifdef COHORT_HAVE_GLOO
  if (backend == "gloo")
    return std::make_unique<gloo::Communicator>(std::move(store), rank, size, gloo_options(options));
  // --- issue 5 item 3: hierarchical = shm per host + a flat gloo communicator
  // over all ranks for the cross-host part (see hierarchical/communicator.h).
  if (backend == "hierarchical") {
    auto flat = std::make_unique<gloo::Communicator>(std::make_shared<rendezvous::PrefixStore>("flat", store), rank,
                                                     size, gloo_options(options));
    hierarchical::Options h = hierarchical::options_from_env();
    if (options.timeout.count() > 0) h.shm.timeout = options.timeout;
    h.shm.job_id = options.job_id;
    return std::make_unique<hierarchical::Communicator>(
        std::move(flat), std::make_shared<rendezvous::PrefixStore>("local", store), std::move(h));
  }
#endif
#ifdef COHORT_HAVE_MPI
  if (backend == "mpi") {
    mpi::Options o = mpi::options_from_env();
    if (options.timeout.count() > 0) o.timeout = options.timeout;
    auto comm = std::make_unique<mpi::Communicator>(std::move(o));
    COHORT_CHECK_AS(ConfigError, comm->rank() == rank && comm->size() == size)
        << "the mpi backend is MPI's world, rank " << comm->rank() << " of " << comm->size()
        << ", but rank " << rank << " of " << size << " was asked for (start the job with mpirun or srun)";
    return comm;
  }
#endif
  COHORT_THROW(ConfigError) << "backend '" << backend << "' is not available in this build";
}

World init_world() {
  CommunicatorOptions options = options_from_env();
  const rendezvous::Environment env = rendezvous::process_environment();
#ifdef COHORT_HAVE_MPI
  // Under mpirun/srun, MPI's world is the communicator; it needs no store
  // address (one is bootstrapped over MPI for the engine).
  if (options.backend == "auto" || options.backend == "mpi")
    if (auto source = mpi_launch(env)) {
      if (auto world = init_mpi_world(env, *source, options)) return std::move(*world);
    }
#endif
  COHORT_CHECK_AS(ConfigError, options.backend != "mpi")
      << "COHORT_BACKEND=mpi needs a job started by mpirun or by srun --mpi=pmix"
      << (std::string(", and a build with MPI (available: ") + available_text() + ")");
  World world;
  world.info = rendezvous::discover(env);
  const auto& info = world.info;
  logging::set_rank(info.rank);
  options.job_id = info.job_id;
  // MPI is not the world's communicator (no MPI launch with PMI, MPI
  // declined the job, or another backend was asked for), so "auto" must not
  // pick it: it would abort a task that srun started without PMIx.
  options.launch_source = rendezvous::LaunchSource::single;
  options.all_local = info.local_size == info.size;
  options.store_host = info.store_host;
  connect_store(world);
  world.options = options;
  if (info.elastic_slot >= 0) {
    keep_beating(world, me(world));
    // A process started while the job runs says it can join; the first
    // processes are epoch 0.
    if (info.elastic_joining) rendezvous::announce_ready(*world.store, me(world));
    join_next_epoch(world, -1);
    // The banner's collectives are made by the first world's members only:
    // a replacement joins members that are in reform_world(), which makes
    // none.
    if (world.membership.epoch != 0) return world;
  } else {
    if (info.heartbeat) keep_beating(world, {info.rank, 0});
    // A communicator needs a namespace of its own (shm's segment name, gloo's
    // addresses), and a process may init() again after shutdown(): the n-th
    // world of a process (the same n on every rank: init is collective)
    // rendezvous under "world", then "world.1", ...
    static std::atomic<int> worlds_before{0};
    const int n = worlds_before.fetch_add(1);
    auto store =
        std::make_shared<rendezvous::PrefixStore>(n == 0 ? "world" : "world." + std::to_string(n), world.store);
    world.comm = create_communicator(std::move(store), info.rank, info.size, options);
  }
  announce(world);
  return world;
}

void reform_world(World& world) {
  COHORT_CHECK_AS(ConfigError, world.info.elastic_slot >= 0)
      << "reform_world() is for elastic jobs (cohortrun --min-np); this one is of fixed size";
  world.comm.reset();
  join_next_epoch(world, world.membership.epoch);
}

}  // namespace cohort::comm
