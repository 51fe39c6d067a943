#include "cohort/rendezvous/prefix_store.h"

#include <vector>

#include "cohort/common/check.h"

namespace cohort::rendezvous {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  COHORT_CHECK(inner_ != nullptr) << "PrefixStore '" << prefix_ << "' needs an inner store";
  // Blocking calls without a timeout use the inner store's default.
  set_default_timeout(inner_->default_timeout());
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key, Duration timeout) {
  return inner_->get(full(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(full(key), delta); }

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(std::span<const std::string> keys, Duration timeout) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& k : keys) full_keys.push_back(full(k));
  inner_->wait(full_keys, timeout);
}

bool PrefixStore::check(std::span<const std::string> keys) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& k : keys) full_keys.push_back(full(k));
  return inner_->check(full_keys);
}

bool PrefixStore::remove(const std::string& key) { return inner_->remove(full(key)); }

}  // namespace cohort::rendezvous
