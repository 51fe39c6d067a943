// MemoryStore: a Store inside one process, for ranks run as threads (tests,
// DataParallel). All operations are linearisable under one mutex.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(std::span<const std::string> keys, Duration timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool remove(const std::string& key) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
};

}  // namespace cohort::rendezvous
