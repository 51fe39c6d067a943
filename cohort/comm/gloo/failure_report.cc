#include "cohort/comm/gloo/failure_report.h"

#include <sstream>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/logging.h"

namespace cohort::comm::gloo {
namespace {

using Clock = std::chrono::steady_clock;

// One line per field; the message comes last and may hold newlines.
std::string encode(const FailureRecord& r) {
  std::ostringstream os;
  os << int(r.kind) << '\n' << r.sequence << '\n' << r.culprit << '\n' << r.call << '\n' << r.message;
  return os.str();
}

bool decode(const std::string& text, FailureRecord& r) {
  std::istringstream is(text);
  int kind = -1;
  std::string line;
  if (!(is >> kind >> r.sequence >> r.culprit) || kind < 0 || kind > int(FailureRecord::Kind::left)) return false;
  r.kind = static_cast<FailureRecord::Kind>(kind);
  std::getline(is, line);  // the rest of the culprit line
  std::getline(is, r.call);
  std::ostringstream rest;
  rest << is.rdbuf();
  r.message = rest.str();
  return true;
}

}  // namespace

FailureReport::FailureReport(std::shared_ptr<rendezvous::Store> store, int rank, std::chrono::milliseconds grace)
    : store_(std::move(store)), rank_(rank), grace_(grace) {}

void FailureReport::publish(const FailureRecord& mine) noexcept {
  if (published_) return;
  published_ = true;
  try {
    store_->set(key(rank_), encode(mine));
  } catch (const std::exception& e) {
    COHORT_LOG(warn) << "could not publish the failure report of rank " << rank_ << ": " << e.what();
  }
}

std::map<int, FailureRecord> FailureReport::collect(std::span<const int> ranks) noexcept {
  std::map<int, FailureRecord> found;
  const auto deadline = Clock::now() + grace_;
  for (int r : ranks) {
    if (r == rank_) continue;
    try {
      const std::string k = key(r);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      const std::string keys[] = {k};
      // check() first: once the grace is spent, records already written are
      // still read.
      if (!store_->check(keys)) {
        if (left.count() <= 0) continue;
        store_->wait(keys, left);
      }
      FailureRecord record;
      if (decode(store_->get(k, std::chrono::milliseconds(1000)), record)) found.emplace(r, std::move(record));
    } catch (const std::exception&) {
      // Not written in time, or the store is gone: no explanation from r.
    }
  }
  return found;
}

}  // namespace cohort::comm::gloo
