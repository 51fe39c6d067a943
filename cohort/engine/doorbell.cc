#include "cohort/engine/doorbell.h"

#include "cohort/common/error.h"

namespace cohort::engine {
namespace {
const std::string kFailed = "failed";
}

Doorbell::Doorbell(std::shared_ptr<rendezvous::Store> store, std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)) {}

bool Doorbell::ring_if_sleeping() {
  std::lock_guard lock(mutex_);
  if (!sleeping_ || rung_) return false;
  rung_ = true;
  store_->set(key(epoch_), "");
  return true;
}

void Doorbell::begin_sleep(uint64_t epoch, const std::function<bool()>& has_work) {
  {
    std::lock_guard lock(mutex_);
    sleeping_ = true;
    rung_ = false;
    epoch_ = epoch;
  }
  if (has_work()) ring_if_sleeping();
}

Doorbell::Ring Doorbell::wait(rendezvous::Duration timeout) {
  try {
    return store_->get(key(epoch_), timeout) == kFailed ? Ring::failure : Ring::work;
  } catch (const TimeoutError&) {
    return Ring::none;
  }
}

void Doorbell::ring_failure(uint64_t epoch) { store_->set(key(epoch), kFailed); }

void Doorbell::end_sleep() {
  std::lock_guard lock(mutex_);
  sleeping_ = false;
}

void Doorbell::forget(uint64_t epoch) { store_->remove(key(epoch)); }

}  // namespace cohort::engine
