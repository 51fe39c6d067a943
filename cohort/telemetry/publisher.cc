#include "cohort/telemetry/publisher.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "cohort/common/logging.h"
#include "cohort/telemetry/job_record.h"
#include "cohort/telemetry/keys.h"

namespace cohort::telemetry {
namespace {

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

Publisher::Publisher(std::shared_ptr<rendezvous::Store> store, StepAccounting& accounting, PublisherOptions options)
    : store_(std::move(store)),
      accounting_(accounting),
      options_(options),
      detector_(options.straggler),
      host_(this_host()),
      thread_([this] { loop(); }) {}

Publisher::~Publisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

StragglerVerdict Publisher::verdict() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdict_;
}

void Publisher::loop() {
  // Rank 0 reads the others every other period: their samples change no
  // faster than that.
  int64_t tick = 0;
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, options_.period, [&] { return stop_; });
      stopping = stop_;
    }
    try {
      publish_once();
      if (options_.watch_stragglers && tick++ % 2 == 1) watch_once();
    } catch (const std::exception& e) {
      // The store is gone (the job ended) or unreachable: telemetry is not
      // worth failing the job for, and there is nothing left to tell.
      COHORT_LOG(debug) << "telemetry: stops publishing: " << e.what();
      return;
    }
    if (stopping) return;
  }
}

void Publisher::publish_once() {
  const StepAccounting::Window w = accounting_.take_window();
  RankSample s;
  if (w.totals.steps == 0) {
    // No step ended in this window (a long step, evaluation, a checkpoint):
    // the last means stand, with a new time so readers see the rank alive.
    if (last_.window_steps == 0) return;  // nothing published yet
    s = last_;
  } else {
    s = {.rank = options_.rank,
         .size = options_.size,
         .membership_epoch = options_.membership_epoch,
         .host = host_,
         .pid = static_cast<int64_t>(getpid()),
         .epoch = w.epoch,
         .step = w.step};
    set_means(s, w.totals);
  }
  s.unix_time_s = unix_now_s();
  s.rss_bytes = resident_set_bytes();
  last_ = s;
  store_->set(keys::rank_sample(options_.rank), to_json(s));
}

void Publisher::watch_once() {
  std::vector<RankSample> samples = read_rank_samples(*store_, options_.size);
  // A sample of an earlier world (elastic) is not this world's rank r.
  std::erase_if(samples, [&](const RankSample& s) {
    return s.membership_epoch != options_.membership_epoch || s.size != options_.size;
  });
  const StragglerVerdict v = detector_.observe(samples, unix_now_s());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    verdict_ = v;
  }
  store_->set(keys::kStraggler, to_json(v));
  if (!detector_.changed()) return;
  char cleared[96];
  std::snprintf(cleared, sizeof cleared, "cleared: no rank is %.0f%% slower than the others any more",
                options_.straggler.threshold * 100);
  const std::string line = v.present ? v.message() : cleared;
  if (options_.print) {
    std::fprintf(stderr, "cohort: straggler: %s\n", line.c_str());
    std::fflush(stderr);
  }
  publish_event(*store_, {.unix_time_s = v.unix_time_s, .kind = "straggler", .message = line});
}

}  // namespace cohort::telemetry
