// Publisher: the thread that puts this rank's RankSample into the job's
// store a few times a second (keys::rank_sample), from a StepAccounting the
// training thread fills; on rank 0 it also reads every rank's sample, runs
// the StragglerDetector, writes its verdict (keys::kStraggler) and prints
// one line on stderr when a straggler is named or cleared:
//
//   cohort: straggler: rank 2 (pid 4711 on h1) is 45% slower than the median of the others at compute for 3.0 s
//
// Nothing it does is on the training thread's path; a store that fails
// (the job ended) stops it quietly. Only windows with steps are published.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/rendezvous/store.h"
#include "cohort/telemetry/rank_sample.h"
#include "cohort/telemetry/step_accounting.h"
#include "cohort/telemetry/straggler.h"

namespace cohort::telemetry {

struct PublisherOptions {
  int rank = 0;
  int size = 1;
  int64_t membership_epoch = -1;
  std::chrono::milliseconds period{250};  // COHORT_TELEMETRY_INTERVAL_MS
  bool watch_stragglers = false;          // rank 0: detect, write the verdict, print
  bool print = true;                      // the straggler line on stderr
  StragglerOptions straggler;
};

class Publisher {
 public:
  // `store`: the job's root store (thread-safe); `accounting` must outlive
  // the publisher.
  Publisher(std::shared_ptr<rendezvous::Store> store, StepAccounting& accounting, PublisherOptions options);
  // Publishes the last window, then stops the thread.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // The latest verdict of rank 0's detector (a default one elsewhere).
  StragglerVerdict verdict() const;

 private:
  void loop();
  void publish_once();
  void watch_once();

  std::shared_ptr<rendezvous::Store> store_;
  StepAccounting& accounting_;
  PublisherOptions options_;
  StragglerDetector detector_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  StragglerVerdict verdict_;
  RankSample last_;  // the publisher thread's last sample
  std::string host_;
  std::thread thread_;
};

}  // namespace cohort::telemetry
