#include "cohort/rendezvous/memory_store.h"

#include <vector>

#include "cohort/rendezvous/store_util.h"

namespace cohort::rendezvous {
namespace {
const std::string kWhere = "memory store";
}

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, Duration timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [&] { return values_.contains(key); }))
    detail::throw_get_timeout(kWhere, key, timeout);
  return values_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    result = detail::add_to_counter(kWhere, key, it == values_.end() ? nullptr : &it->second, delta);
    values_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

Bytes MemoryStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      // An absent key matches only an empty `expected`; otherwise it stays
      // absent and the (empty) absent value is returned.
      if (!expected.empty()) return {};
      values_.emplace(key, desired);
    } else if (it->second == expected) {
      it->second = desired;
    } else {
      return it->second;
    }
    result = desired;
  }
  changed_.notify_all();
  return result;
}

void MemoryStore::wait(std::span<const std::string> keys, Duration timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock lock(mutex_);
  auto all_present = [&] {
    for (const auto& k : keys)
      if (!values_.contains(k)) return false;
    return true;
  };
  if (changed_.wait_until(lock, deadline, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!values_.contains(k)) missing.push_back(k);
  detail::throw_wait_timeout(kWhere, missing, timeout);
}

bool MemoryStore::check(std::span<const std::string> keys) {
  std::lock_guard lock(mutex_);
  for (const auto& k : keys)
    if (!values_.contains(k)) return false;
  return true;
}

bool MemoryStore::remove(const std::string& key) {
  std::lock_guard lock(mutex_);
  return values_.erase(key) > 0;
}

}  // namespace cohort::rendezvous
