// Store: the small key-value service ranks use to find each other.
//
// Keys are strings, values are byte strings. Every call may be made from any
// thread. Blocking calls take a timeout and throw TimeoutError naming the
// keys they waited for; a store that becomes unreachable throws
// PeerLostError. Implementations: MemoryStore (ranks as threads, tests),
// FileStore (a shared directory), TcpStore (a client of TcpStoreServer,
// authenticated by the job secret), PrefixStore (a namespace inside another).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cohort::rendezvous {

using Bytes = std::string;  // values are arbitrary bytes
using Duration = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value, and wakes the
  // callers waiting for it.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // The value of `key`, waiting until it is set; TimeoutError after `timeout`.
  virtual Bytes get(const std::string& key, Duration timeout) = 0;
  Bytes get(const std::string& key) { return get(key, default_timeout()); }

  // Atomically adds `delta` to the integer under `key` (absent counts as 0,
  // stored as decimal text) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Atomically sets `key` to `desired` if its current value equals `expected`
  // (an empty `expected` matches an absent key) and returns the value the key
  // holds afterwards (`desired` on success, the current value otherwise).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;

  // Waits until every key exists; TimeoutError names the missing ones.
  virtual void wait(std::span<const std::string> keys, Duration timeout) = 0;

  // True when every key exists, without waiting.
  virtual bool check(std::span<const std::string> keys) = 0;

  // Removes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;

  // The timeout used by the overloads without one (COHORT_TIMEOUT_S unless set).
  Duration default_timeout() const { return default_timeout_; }
  void set_default_timeout(Duration t) { default_timeout_ = t; }

 protected:
  Store();

 private:
  Duration default_timeout_;
};

}  // namespace cohort::rendezvous
