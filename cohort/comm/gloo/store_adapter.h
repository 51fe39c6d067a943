// StoreAdapter: Gloo's rendezvous::Store on top of a cohort Store, so that
// Gloo's full-mesh rendezvous goes through cohort's authenticated store
// (TcpStore in a job, MemoryStore for ranks as threads).
//
// Keys are passed through unchanged (hand in a PrefixStore to isolate a
// group). Every blocking call waits at most `timeout`; cohort's errors
// (TimeoutError naming the keys, PeerLostError for a lost store) propagate
// through Gloo unchanged.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"

namespace cohort::comm::gloo {

class StoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<rendezvous::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace cohort::comm::gloo
