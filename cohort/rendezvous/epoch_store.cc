#include "cohort/rendezvous/epoch_store.h"

#include <algorithm>
#include <chrono>

#include "cohort/rendezvous/membership.h"

namespace cohort::rendezvous {
namespace {

// How long one slice of an armed wait lasts: the delay between a later
// epoch's publication and the members noticing it.
constexpr Duration kSlice{100};

}  // namespace

EpochStore::EpochStore(std::shared_ptr<Store> job_store, int64_t epoch)
    : PrefixStore("world/e" + std::to_string(epoch), job_store), job_store_(std::move(job_store)), epoch_(epoch) {}

void EpochStore::throw_if_superseded() {
  throw_if_ended(*job_store_);
  if (latest_epoch(*job_store_) > epoch_)
    throw EpochSuperseded("elastic epoch " + std::to_string(epoch_) +
                          " was superseded while its world formed (a member was lost)");
}

void EpochStore::wait(std::span<const std::string> keys, Duration timeout) {
  if (!armed_) return PrefixStore::wait(keys, timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    try {
      // The last slice's TimeoutError is the caller's, naming the keys.
      return PrefixStore::wait(keys, std::clamp(left, Duration(0), kSlice));
    } catch (const TimeoutError&) {
      if (left <= kSlice) throw;
    }
    // Keys that came just now still form this world; otherwise a later
    // epoch means it never will.
    if (PrefixStore::check(keys)) return;
    throw_if_superseded();
  }
}

Bytes EpochStore::get(const std::string& key, Duration timeout) {
  if (armed_) wait(std::span(&key, 1), timeout);
  return PrefixStore::get(key, timeout);
}

}  // namespace cohort::rendezvous
