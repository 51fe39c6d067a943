#include "cohort/comm/gloo/store_adapter.h"

namespace cohort::comm::gloo {

StoreAdapter::StoreAdapter(std::shared_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void StoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, rendezvous::Bytes(data.begin(), data.end()));
}

std::vector<char> StoreAdapter::get(const std::string& key) {
  // Gloo calls get only after wait, but a get that waits is what its own
  // stores do too.
  const rendezvous::Bytes value = store_->get(key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void StoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void StoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout (ours); a non-positive one means "use
  // the default" in Gloo's own stores.
  store_->wait(keys, timeout.count() > 0 ? timeout : timeout_);
}

}  // namespace cohort::comm::gloo
