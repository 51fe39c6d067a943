// A process's heartbeat in an elastic job (cohortrun --min-np): a thread
// that adds 1 to the process's counter in the job's store
// (elastic/alive/<slot>.<incarnation>, membership.h) every period, so that
// the launcher tells a silent process (behind a cut link, on a hung host:
// alive to its kernel, gone to its peers) from a busy one. The launcher
// kills a member silent for COHORT_ELASTIC_HEARTBEAT_TIMEOUT_S and the job
// goes on as after its death.
//
// It beats from its own thread, whatever the process does (training, a
// long collective, a wait in the store), until destroyed. A beat that fails
// stops it: the store is gone (the job ended) or cannot be reached, and
// silence is then the truth.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "cohort/rendezvous/membership.h"
#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class Heartbeat {
 public:
  // Beats at once, then every `period`. `store` must be thread-safe (the
  // TCP store is): the process uses it meanwhile.
  Heartbeat(std::shared_ptr<Store> store, Member me, Duration period);
  // Stops the thread (waits for a beat in flight); in a fork()ed child,
  // which has no such thread, does nothing.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void loop();

  std::shared_ptr<Store> store_;
  Member me_;
  Duration period_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  pid_t owner_;  // the process whose thread beats
  std::unique_ptr<std::thread> thread_;
};

}  // namespace cohort::rendezvous
