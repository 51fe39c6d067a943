// PrefixStore: a namespace inside another Store. Every key is stored as
// "<prefix>/<key>", so communicators created by split() cannot collide.
#pragma once

#include <memory>
#include <string>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  using Store::get;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(std::span<const std::string> keys, Duration timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool remove(const std::string& key) override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace cohort::rendezvous
