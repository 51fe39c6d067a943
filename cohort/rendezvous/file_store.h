// FileStore: a Store kept in a directory that every rank can reach (a local
// or shared filesystem). One file per key, written atomically (temporary file
// and rename); add and compare_set are serialised with flock on a lock file.
// Waiters poll. Keys may hold any characters: file names are hex-encoded
// (keys over 100 bytes are named by their SHA-256, to stay under NAME_MAX).
#pragma once

#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class FileStore : public Store {
 public:
  // Creates `directory` (mode 0700) when absent. ConfigError when it cannot.
  explicit FileStore(std::string directory);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(std::span<const std::string> keys, Duration timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool remove(const std::string& key) override;

 private:
  std::string directory_;
};

}  // namespace cohort::rendezvous
