// The replicated decision step, driven with hand-made cycle records: cache
// bits, naming, eviction, mismatch messages, join, ordered windows. No
// communicator: every rank's Negotiator gets the same inputs, so one
// instance stands for all of them.
#include <gtest/gtest.h>

#include <map>

#include "cohort/common/error.h"
#include "cohort/engine/negotiation.h"
#include "cohort/engine/wire.h"

namespace cohort::engine::negotiation_test {
namespace {

OpMeta allreduce(uint64_t count, DType dtype = DType::f32, ReduceOp op = ReduceOp::sum) {
  OpMeta m;
  m.kind = OpKind::allreduce;
  m.dtype = dtype;
  m.op = op;
  m.count = count;
  return m;
}

// One cycle's inputs for `n` ranks, built rank by rank.
class Cycle {
 public:
  Cycle(int n, size_t cache_words) : n_(n), cache_words_(cache_words), words_(cycle_state_words(cache_words)),
                                     records_(size_t(n) * words_), bodies_(size_t(n)), entries_(size_t(n), 0) {
    for (int r = 0; r < n; ++r) writers_.emplace_back(std::span(records_).subspan(size_t(r) * words_, words_), cache_words);
  }
  Cycle& report(int rank, const std::string& name, const OpMeta& meta) {
    append_entry(bodies_[size_t(rank)], name, meta);
    ++entries_[size_t(rank)];
    return *this;
  }
  Cycle& bit(int rank, int slot) {
    writers_[size_t(rank)].set_bit(size_t(slot));
    return *this;
  }
  Cycle& join(int rank) {
    writers_[size_t(rank)].set_flag(kJoined);
    return *this;
  }
  Cycle& ordered(int rank, const OpMeta& meta) {
    EXPECT_TRUE(writers_[size_t(rank)].offer_ordered(OrderedSignature::of(meta)));
    return *this;
  }
  Decision run(Negotiator& neg, uint64_t cycle = 1) {
    for (int r = 0; r < n_; ++r) {
      payloads_.push_back(entries_[size_t(r)] ? finish_payload(bodies_[size_t(r)], entries_[size_t(r)]) : "");
      writers_[size_t(r)].set_payload_bytes(payloads_.back().size());
    }
    for (int r = 0; r < n_; ++r) {
      views_.emplace_back(records_.data() + size_t(r) * words_, cache_words_);
      spans_.emplace_back(reinterpret_cast<const std::byte*>(payloads_[size_t(r)].data()), payloads_[size_t(r)].size());
    }
    Decision d;
    neg.decide(views_, spans_, cycle, d);
    return d;
  }
  std::vector<CycleStateView>& views() { return views_; }

 private:
  int n_;
  size_t cache_words_, words_;
  std::vector<uint64_t> records_;
  std::vector<CycleStateWriter> writers_;
  std::vector<std::string> bodies_;
  std::vector<uint32_t> entries_;
  std::vector<std::string> payloads_;
  std::vector<CycleStateView> views_;
  std::vector<std::span<const std::byte>> spans_;
};

std::vector<std::string> names(const Decision& d) {
  std::vector<std::string> v;
  for (const auto& op : d.ready) v.push_back(op.name);
  return v;
}

TEST(Negotiation, NameRunsWhenEveryRankReportedItThenByBit) {
  Negotiator neg(3, 16);
  auto d = Cycle(3, 0).report(0, "a", allreduce(10)).report(2, "a", allreduce(10)).run(neg);
  EXPECT_TRUE(d.ready.empty()) << "rank 1 has not reported 'a'";
  EXPECT_TRUE(d.negotiated);
  d = Cycle(3, 0).report(1, "a", allreduce(10)).run(neg);
  ASSERT_EQ(names(d), std::vector<std::string>{"a"});
  EXPECT_EQ(d.ready[0].slot, 0);
  EXPECT_EQ(d.ready[0].contributors, 3);
  EXPECT_TRUE(d.ready[0].holders.empty());
  EXPECT_EQ(neg.cache().find("a"), 0);

  // Second step: bits only. Not ready until every rank set it.
  d = Cycle(3, 1).bit(0, 0).bit(1, 0).run(neg);
  EXPECT_TRUE(d.ready.empty());
  EXPECT_FALSE(d.negotiated);
  d = Cycle(3, 1).bit(0, 0).bit(1, 0).bit(2, 0).run(neg);
  ASSERT_EQ(names(d), std::vector<std::string>{"a"});
  EXPECT_EQ(d.cache_hits_ready, 1u);
  EXPECT_FALSE(d.negotiated);
}

TEST(Negotiation, ExecutionOrderIsCachedSlotsThenCompletionOrder) {
  Negotiator neg(2, 16);
  Cycle(2, 0).report(0, "x", allreduce(1)).report(0, "y", allreduce(2)).report(1, "y", allreduce(2))
      .report(1, "x", allreduce(1)).run(neg);
  ASSERT_EQ(neg.cache().find("y"), 0) << "y completed first (rank 1 reported it first)";
  ASSERT_EQ(neg.cache().find("x"), 1);
  auto d = Cycle(2, 1).bit(0, 1).bit(1, 1).bit(0, 0).bit(1, 0).report(0, "z", allreduce(3)).report(1, "z", allreduce(3))
               .run(neg);
  EXPECT_EQ(names(d), (std::vector<std::string>{"y", "x", "z"}));
}

TEST(Negotiation, MismatchNamesTensorRanksAndWhatEachSent) {
  Negotiator neg(3, 16);
  auto d = Cycle(3, 0)
               .report(0, "w", allreduce(100))
               .report(1, "w", allreduce(50))
               .report(2, "w", allreduce(100, DType::f64))
               .run(neg);
  EXPECT_TRUE(d.ready.empty());
  ASSERT_EQ(d.mismatches.size(), 1u);
  const std::string& m = d.mismatches[0].message;
  EXPECT_EQ(d.mismatches[0].name, "w");
  EXPECT_NE(m.find("'w'"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 submitted allreduce(100 f32, sum)"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 submitted allreduce(50 f32, sum)"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2 submitted allreduce(100 f64, sum)"), std::string::npos) << m;
  EXPECT_EQ(neg.cache().find("w"), -1) << "a mismatched op is not cached";
}

TEST(Negotiation, MismatchGroupsRanksThatAgree) {
  Negotiator neg(4, 16);
  OpMeta b = allreduce(8);
  b.op = ReduceOp::max;
  auto d = Cycle(4, 0).report(0, "g", allreduce(8)).report(1, "g", b).report(2, "g", allreduce(8)).report(3, "g", b).run(neg);
  ASSERT_EQ(d.mismatches.size(), 1u);
  EXPECT_NE(d.mismatches[0].message.find("ranks 0, 2 submitted allreduce(8 f32, sum); ranks 1, 3 submitted allreduce(8 f32, max)"),
            std::string::npos)
      << d.mismatches[0].message;
}

TEST(Negotiation, ShapeRootAndScalesAreCompared) {
  Negotiator neg(2, 16);
  OpMeta a = allreduce(12), b = allreduce(12);
  a.shape = {3, 4};
  b.shape = {4, 3};
  EXPECT_EQ(Cycle(2, 0).report(0, "s", a).report(1, "s", b).run(neg).mismatches.size(), 1u);
  OpMeta c = allreduce(4), e = allreduce(4);
  c.kind = e.kind = OpKind::broadcast;
  c.root = 0;
  e.root = 1;
  EXPECT_EQ(Cycle(2, 0).report(0, "r", c).report(1, "r", e).run(neg).mismatches.size(), 1u);
  OpMeta f = allreduce(4), g = allreduce(4);
  g.postscale = 0.5;
  EXPECT_EQ(Cycle(2, 0).report(0, "p", f).report(1, "p", g).run(neg).mismatches.size(), 1u);
}

TEST(Negotiation, AllgatherCountsAndFirstDimMayDiffer) {
  Negotiator neg(2, 16);
  OpMeta a, b;
  a.kind = b.kind = OpKind::allgather;
  a.row_elements = b.row_elements = 3;
  a.count = 6;
  a.shape = {2, 3};
  b.count = 9;
  b.shape = {3, 3};
  auto d = Cycle(2, 0).report(0, "ag", a).report(1, "ag", b).run(neg);
  EXPECT_TRUE(d.mismatches.empty());
  ASSERT_EQ(names(d), std::vector<std::string>{"ag"});
  b.shape = {3, 1, 3};
  b.row_elements = 3;
  neg = Negotiator(2, 16);
  EXPECT_EQ(Cycle(2, 0).report(0, "ag", a).report(1, "ag", b).run(neg).mismatches.size(), 1u);
}

TEST(Negotiation, ChangedMetaEvictsTheSlotAndMismatchesAgainstCachedRanks) {
  Negotiator neg(2, 16);
  Cycle(2, 0).report(0, "x", allreduce(10)).report(1, "x", allreduce(10)).run(neg);
  ASSERT_EQ(neg.cache().find("x"), 0);
  // Rank 0 hits the cache; rank 1 now submits another size and reports it.
  auto d = Cycle(2, 1).bit(0, 0).report(1, "x", allreduce(20)).run(neg);
  EXPECT_EQ(d.evicted_slots, std::vector<int>{0});
  ASSERT_EQ(d.mismatches.size(), 1u);
  EXPECT_NE(d.mismatches[0].message.find("rank 0 submitted allreduce(10"), std::string::npos) << d.mismatches[0].message;
  EXPECT_NE(d.mismatches[0].message.find("rank 1 submitted allreduce(20"), std::string::npos) << d.mismatches[0].message;
  EXPECT_EQ(neg.cache().find("x"), -1);
}

TEST(Negotiation, ChangedMetaOnEveryRankRecachesIt) {
  Negotiator neg(2, 16);
  Cycle(2, 0).report(0, "x", allreduce(10)).report(1, "x", allreduce(10)).run(neg);
  auto d = Cycle(2, 1).report(0, "x", allreduce(20)).report(1, "x", allreduce(20)).run(neg);
  EXPECT_TRUE(d.mismatches.empty());
  ASSERT_EQ(names(d), std::vector<std::string>{"x"});
  EXPECT_EQ(d.ready[0].meta.count, 20u);
  // Cached again, with the new meta (not the old entry kept).
  const int slot = neg.cache().find("x");
  ASSERT_GE(slot, 0);
  EXPECT_EQ(neg.cache().entry(slot).meta.count, 20u);
}

TEST(Negotiation, FullCacheReusesTheLeastRecentlyRunIdleSlot) {
  Negotiator neg(1, 2);
  Cycle(1, 0).report(0, "a", allreduce(1)).run(neg, 1);
  Cycle(1, 1).report(0, "b", allreduce(1)).run(neg, 2);
  Cycle(1, 1).bit(0, 0).run(neg, 3);  // a runs again: b is now the older
  Cycle(1, 1).report(0, "c", allreduce(1)).run(neg, 4);
  EXPECT_EQ(neg.cache().find("b"), -1);
  EXPECT_EQ(neg.cache().find("c"), 1);
  EXPECT_EQ(neg.cache().find("a"), 0);
  // Every slot waited on: the newcomer runs uncached.
  auto d = Cycle(1, 1).bit(0, 0).bit(0, 1).report(0, "d", allreduce(1)).run(neg, 5);
  EXPECT_EQ(names(d), (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(d.ready[2].slot, -1);
  EXPECT_EQ(neg.cache().find("d"), -1);
}

TEST(Negotiation, JoinedRanksStandInAndLastJoinerIsReported) {
  Negotiator neg(3, 16);
  Cycle(3, 0).report(0, "g", allreduce(4)).report(1, "g", allreduce(4)).report(2, "g", allreduce(4)).run(neg);
  // Rank 2 joins; ranks 0 and 1 set the bit: ready, with 2 contributors.
  auto d = Cycle(3, 1).join(2).bit(0, 0).bit(1, 0).run(neg);
  ASSERT_EQ(names(d), std::vector<std::string>{"g"});
  EXPECT_EQ(d.ready[0].contributors, 2);
  EXPECT_EQ(d.ready[0].holders, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(d.active_ranks, 2);
  EXPECT_FALSE(d.all_joined);
  // A name reported by rank 0 only waits for rank 1 ...
  d = Cycle(3, 1).join(2).report(0, "n", allreduce(2)).run(neg);
  EXPECT_TRUE(d.ready.empty());
  // ... and runs when rank 1 joins instead of reporting it.
  d = Cycle(3, 1).join(2).join(1).run(neg);
  ASSERT_EQ(names(d), std::vector<std::string>{"n"});
  EXPECT_EQ(d.ready[0].contributors, 1);
  d = Cycle(3, 1).join(2).join(1).join(0).run(neg);
  EXPECT_TRUE(d.all_joined);
  EXPECT_EQ(d.last_joined, 0);
  // Two ranks joining in the same cycle: the higher is "last".
  Negotiator neg2(3, 16);
  Cycle(3, 0).join(0).run(neg2);
  d = Cycle(3, 0).join(0).join(1).join(2).run(neg2);
  EXPECT_TRUE(d.all_joined);
  EXPECT_EQ(d.last_joined, 2);
}

TEST(Negotiation, OrderedWindowRunsWhatEveryRankOfferedAndChecksIt) {
  Negotiator neg(2, 16);
  auto d = Cycle(2, 0).ordered(0, allreduce(5)).ordered(0, allreduce(6)).ordered(1, allreduce(5)).run(neg);
  EXPECT_EQ(d.ordered_consumed, 1u);
  ASSERT_EQ(d.ready.size(), 1u);
  EXPECT_TRUE(d.ready[0].ordered);
  EXPECT_EQ(d.ready[0].meta.count, 5u);
  // Position 0 now is rank 0's second op (6) and rank 1's second (7): mismatch.
  d = Cycle(2, 0).ordered(0, allreduce(6)).ordered(1, allreduce(7)).run(neg);
  EXPECT_EQ(d.ordered_consumed, 1u);
  EXPECT_TRUE(d.ready.empty());
  ASSERT_EQ(d.ordered_failures.size(), 1u);
  EXPECT_NE(d.ordered_failures[0].find("ordered op #1"), std::string::npos) << d.ordered_failures[0];
  EXPECT_NE(d.ordered_failures[0].find("rank 0 submitted allreduce(6 f32, sum)"), std::string::npos)
      << d.ordered_failures[0];
  EXPECT_NE(d.ordered_failures[0].find("rank 1 submitted allreduce(7 f32, sum)"), std::string::npos)
      << d.ordered_failures[0];
}

TEST(Negotiation, WaitingListsNamesBitsAndOrderedOps) {
  Negotiator neg(2, 16);
  Cycle(2, 0).report(0, "c", allreduce(1)).report(1, "c", allreduce(1)).run(neg);
  Cycle cyc(2, 1);
  cyc.report(0, "n", allreduce(1)).bit(1, 0).ordered(0, allreduce(3)).run(neg);
  std::map<std::string, std::vector<bool>> seen;
  neg.for_each_waiting(cyc.views(), [&](const std::string& what, const std::vector<bool>& p) { seen[what] = p; });
  EXPECT_EQ(seen["tensor 'n'"], (std::vector<bool>{true, false}));
  EXPECT_EQ(seen["tensor 'c'"], (std::vector<bool>{false, true}));
  EXPECT_EQ(seen["ordered op #0"], (std::vector<bool>{true, false}));
  EXPECT_EQ(seen.size(), 3u);
}

TEST(Wire, RoundTripAndMalformedPayloads) {
  OpMeta m = allreduce(77, DType::bf16, ReduceOp::avg);
  m.prescale = 0.5;
  m.shape = {7, 11};
  std::string body;
  append_entry(body, "layer/0.weight", m);
  append_entry(body, "", OpMeta{});
  const std::string p = finish_payload(body, 2);
  auto entries = parse_payload({reinterpret_cast<const std::byte*>(p.data()), p.size()});
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "layer/0.weight");
  EXPECT_EQ(entries[0].meta, m);
  EXPECT_EQ(entries[1].meta, OpMeta{});
  for (size_t cut : {size_t(0), size_t(3), p.size() / 2, p.size() - 1})
    EXPECT_THROW(parse_payload({reinterpret_cast<const std::byte*>(p.data()), cut}), Error) << "cut at " << cut;
  std::string bad = p;
  bad[4 + 4 + 14] = char(99);  // the first entry's kind
  EXPECT_THROW(parse_payload({reinterpret_cast<const std::byte*>(bad.data()), bad.size()}), Error);
}

}  // namespace
}  // namespace cohort::engine::negotiation_test
