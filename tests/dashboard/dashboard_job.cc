// A torch-free stand-in for a training job, for the dashboard's tests: run
// by cohortrun, each rank reaches the job's store from the launcher's
// environment (COHORT_STORE_ADDR, COHORT_SECRET, COHORT_RANK, COHORT_SIZE)
// and publishes telemetry as fit() does (cohort/telemetry): fake steps of
// a few milliseconds of "compute" (sleep), "input" and "peer wait", summed
// by a StepAccounting and published by a Publisher (rank 0 watching for
// stragglers); rank 0 also publishes the JobRecord and an EpochRecord with a
// fake loss every --steps-per-epoch steps.
//
//   dashboard_job [--steps N] [--step-ms MS] [--steps-per-epoch E] [--slow-rank R]
//
// --slow-rank: that rank computes three times as long (a straggler).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "cohort/rendezvous/tcp_store.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/publisher.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "dashboard_job: %s is not set (run me under cohortrun)\n", name);
    std::exit(2);
  }
  return v;
}

uint64_t sleep_ns(double ms) {
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 200, steps_per_epoch = 20;
  double step_ms = 10;
  int slow_rank = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--steps") steps = std::atoll(value);
    else if (flag == "--step-ms") step_ms = std::atof(value);
    else if (flag == "--steps-per-epoch") steps_per_epoch = std::atoll(value);
    else if (flag == "--slow-rank") slow_rank = std::atoi(value);
    else {
      std::fprintf(stderr, "dashboard_job: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  using namespace cohort;
  const std::string address = env("COHORT_STORE_ADDR");
  const size_t colon = address.rfind(':');
  auto store = std::make_shared<rendezvous::TcpStore>(
      rendezvous::TcpStoreOptions{.host = address.substr(0, colon),
                                  .port = std::atoi(address.substr(colon + 1).c_str()),
                                  .secret = env("COHORT_SECRET")});
  const int rank = std::atoi(env("COHORT_RANK").c_str());
  const int size = std::atoi(env("COHORT_SIZE").c_str());
  if (rank == 0)
    telemetry::publish_job(*store, {.strategy = "dashboard_job (fake steps)",
                                    .backend = "none",
                                    .size = size,
                                    .replicas = size,
                                    .global_batch = 32 * size,
                                    .epochs = (steps + steps_per_epoch - 1) / steps_per_epoch,
                                    .steps_per_epoch = steps_per_epoch,
                                    .unix_time_s = telemetry::unix_now_s()});
  telemetry::StepAccounting accounting;
  {
    telemetry::Publisher publisher(store, accounting,
                                   {.rank = rank,
                                    .size = size,
                                    .period = std::chrono::milliseconds(100),
                                    .watch_stragglers = rank == 0,
                                    .straggler = {.threshold = 0.5, .hold_s = 0.5}});
    const double compute_ms = rank == slow_rank ? 3 * step_ms : step_ms;
    for (int64_t step = 1; step <= steps; ++step) {
      const auto start = Clock::now();
      telemetry::StepTimes t{.rows = 32};
      t.input_ns = sleep_ns(step_ms / 10);
      t.compute_ns = sleep_ns(compute_ms);
      // The others wait for the slow rank, as they would in an allreduce.
      t.peer_wait_ns = sleep_ns(slow_rank >= 0 && rank != slow_rank ? 2 * step_ms : step_ms / 10);
      t.step_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
      const int64_t epoch = (step - 1) / steps_per_epoch;
      accounting.add(t, epoch, step);
      if (rank == 0 && step % steps_per_epoch == 0)
        telemetry::publish_epoch(
            *store, epoch,
            {.epoch = epoch,
             .step = step,
             .unix_time_s = telemetry::unix_now_s(),
             .logs = {{"loss", 2.0 / double(epoch + 1)}, {"accuracy", 1 - 0.5 / double(epoch + 1)}}});
    }
  }
  std::printf("dashboard_job: rank %d of %d done\n", rank, size);
  return 0;
}
