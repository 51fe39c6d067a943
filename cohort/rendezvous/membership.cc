#include "cohort/rendezvous/membership.h"

#include <algorithm>
#include <chrono>
#include <string_view>

#include "cohort/common/check.h"

namespace cohort::rendezvous {
namespace {

const std::string kEpochKey = "elastic/epoch";
const std::string kEndKey = "elastic/end";

std::string members_key(int64_t epoch) { return "elastic/members/" + std::to_string(epoch); }
std::string ready_key(Member m) { return "elastic/ready/" + member_text(m); }
std::string formed_key(int64_t epoch) { return "elastic/formed/" + std::to_string(epoch); }
std::string alive_key(Member m) { return "elastic/alive/" + member_text(m); }
std::string lost_key(int64_t epoch) { return "elastic/lost/" + std::to_string(epoch); }

int parse_int(std::string_view text, const std::string& whole) {
  int value = 0;
  COHORT_CHECK_AS(ConfigError, !text.empty() && text.size() <= 9 &&
                                   std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      << "malformed elastic member '" << whole << "' (expected slot.incarnation)";
  for (char c : text) value = value * 10 + (c - '0');
  return value;
}

std::string members_text(const Membership& m) {
  COHORT_CHECK(m.hosts.empty() || m.hosts.size() == m.members.size())
      << "epoch " << m.epoch << ": " << m.hosts.size() << " host(s) for " << m.members.size() << " member(s)";
  std::string text;
  for (size_t i = 0; i < m.members.size(); ++i) {
    text += (text.empty() ? "" : ",") + member_text(m.members[i]);
    if (!m.hosts.empty()) {
      // Host names (host_list.h) hold letters, digits and . _ - @ only.
      COHORT_CHECK(!m.hosts[i].empty() && m.hosts[i].find_first_of(",/") == std::string::npos)
          << "elastic member " << member_text(m.members[i]) << ": host '" << m.hosts[i]
          << "' cannot be recorded (empty, or holds ',' or '/')";
      text += "/" + m.hosts[i];
    }
  }
  return text;
}

}  // namespace

std::string member_text(Member m) { return std::to_string(m.slot) + "." + std::to_string(m.incarnation); }

Member parse_member(const std::string& text) {
  const size_t dot = text.find('.');
  COHORT_CHECK_AS(ConfigError, dot != std::string::npos)
      << "malformed elastic member '" << text << "' (expected slot.incarnation)";
  return {parse_int(std::string_view(text).substr(0, dot), text), parse_int(std::string_view(text).substr(dot + 1), text)};
}

int Membership::rank_of(Member m) const {
  const auto it = std::find(members.begin(), members.end(), m);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

void publish_membership(Store& store, const Membership& m) {
  store.set(members_key(m.epoch), members_text(m));
  store.set(kEpochKey, std::to_string(m.epoch));
}

void end_membership(Store& store, const std::string& why) { store.set(kEndKey, why); }

void throw_if_ended(Store& store) {
  if (store.check({&kEndKey, 1})) throw MembershipEnded(store.get(kEndKey, Duration(0)));
}

bool member_ready(Store& store, Member m) {
  const std::string key = ready_key(m);
  return store.check({&key, 1});
}

void announce_ready(Store& store, Member me) { store.set(ready_key(me), "ready"); }

bool epoch_formed(Store& store, int64_t epoch) {
  const std::string key = formed_key(epoch);
  return store.check({&key, 1});
}

void announce_formed(Store& store, int64_t epoch) { store.set(formed_key(epoch), "formed"); }

int64_t heartbeats(Store& store, Member m) { return store.add(alive_key(m), 0); }

void beat(Store& store, Member me) { store.add(alive_key(me), 1); }

void announce_lost(Store& store, int64_t epoch, Member m) { store.set(lost_key(epoch), member_text(m)); }

std::optional<std::string> lost_member(Store& store, int64_t epoch) {
  const std::string key = lost_key(epoch);
  if (!store.check({&key, 1})) return std::nullopt;
  return store.get(key, Duration(0));
}

int64_t latest_epoch(Store& store) {
  if (!store.check({&kEpochKey, 1})) return -1;
  const std::string text = store.get(kEpochKey, Duration(0));
  try {
    return std::stoll(text);
  } catch (const std::logic_error&) {
    COHORT_THROW(ConfigError) << "the store's " << kEpochKey << " is '" << text << "', not an epoch number";
  }
}

Membership read_membership(Store& store, int64_t epoch) {
  Membership m;
  m.epoch = epoch;
  const std::string text = store.get(members_key(epoch), Duration(0));
  size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string entry = text.substr(begin, comma - begin);
    const size_t at = entry.find('/');
    m.members.push_back(parse_member(entry.substr(0, at)));
    if (at != std::string::npos) m.hosts.push_back(entry.substr(at + 1));
    begin = comma + 1;
  }
  COHORT_CHECK_AS(ConfigError, m.hosts.empty() || m.hosts.size() == m.members.size())
      << "elastic epoch " << epoch << "'s members '" << text << "' name the hosts of some members only";
  return m;
}

Membership wait_for_membership(Store& store, Member me, int64_t after, Duration timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  // The launcher publishes within a poll of its loop after a death, so a
  // short wait per round keeps recovery fast without spinning on the store.
  constexpr Duration kRound(20);
  const bool joining = after < 0;
  for (;;) {
    throw_if_ended(store);
    const int64_t latest = latest_epoch(store);
    if (latest > after) {
      Membership m = read_membership(store, latest);
      if (m.rank_of(me) >= 0 || !joining) return m;  // a member, or a member removed
      after = latest;  // joining: this epoch was made without us; wait for a later one
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      COHORT_THROW(TimeoutError) << "no elastic membership after epoch " << after << " includes member "
                                 << member_text(me) << " after "
                                 << std::chrono::duration_cast<std::chrono::seconds>(timeout).count() << " s";
    }
    // Block on the next epoch's key (not the latest's: a later epoch is also
    // announced through it becoming the latest, checked above).
    try {
      store.get(members_key(after + 1), std::min(kRound, std::chrono::duration_cast<Duration>(deadline - now)));
    } catch (const TimeoutError&) {
    }
  }
}

}  // namespace cohort::rendezvous
