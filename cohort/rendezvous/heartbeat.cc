#include "cohort/rendezvous/heartbeat.h"

#include <unistd.h>

#include <exception>

#include "cohort/common/logging.h"

namespace cohort::rendezvous {

Heartbeat::Heartbeat(std::shared_ptr<Store> store, Member me, Duration period)
    : store_(std::move(store)), me_(me), period_(period), owner_(::getpid()),
      thread_(std::make_unique<std::thread>([this] { loop(); })) {}

Heartbeat::~Heartbeat() {
  if (::getpid() != owner_) {
    // A fork()ed child has the object but not the thread: nothing to stop.
    (void)thread_.release();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_->join();
}

void Heartbeat::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    try {
      beat(*store_, me_);
    } catch (const std::exception& e) {
      COHORT_LOG(debug) << "heartbeat of " << member_text(me_) << " stops: " << e.what();
      return;
    }
    lock.lock();
    cv_.wait_for(lock, period_, [this] { return stop_; });
  }
}

}  // namespace cohort::rendezvous
