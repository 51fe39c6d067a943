// The pipeline schedules as action lists: every stage runs each micro-batch's
// forward and backward once, in dependency order, and the programs of all
// stages complete together under the strictest message semantics (a send
// blocks until the receiver takes it), which is what makes Pipeline
// deadlock-free on any backend. 1F1B's live micro-batches are bounded by
// the stage count.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/torch/model_parallel/pipeline_schedule.h"

namespace cohort::pipeline_schedule_test {
namespace {

using Kind = PipelineAction::Kind;

// Runs every stage's program with rendezvous messages: a send and the
// matching receive complete together, only when both stages are at them.
// Returns the number of rounds, or -1 on deadlock; checks that messages
// pair up (kind and micro-batch) and that data arrives before it is used.
struct Simulation {
  int rounds = 0;
  bool deadlock = false;
  std::string error;
};

bool is_send(Kind k) { return k == Kind::send_activation || k == Kind::send_gradient; }
bool is_recv(Kind k) { return k == Kind::recv_activation || k == Kind::recv_gradient; }

Simulation simulate(const std::vector<std::vector<PipelineAction>>& prog) {
  const int p = int(prog.size());
  std::vector<size_t> pc(size_t(p), 0);
  Simulation sim;
  auto peer_of = [](int s, Kind k) {
    return (k == Kind::send_activation || k == Kind::recv_gradient) ? s + 1 : s - 1;
  };
  auto matches = [](Kind send, Kind recv) {
    return (send == Kind::send_activation && recv == Kind::recv_activation) ||
           (send == Kind::send_gradient && recv == Kind::recv_gradient);
  };
  for (;;) {
    bool done = true, progress = false;
    for (int s = 0; s < p; ++s) {
      if (pc[size_t(s)] >= prog[size_t(s)].size()) continue;
      done = false;
      const PipelineAction a = prog[size_t(s)][pc[size_t(s)]];
      if (!is_send(a.kind) && !is_recv(a.kind)) {  // compute: always runs
        ++pc[size_t(s)];
        progress = true;
        continue;
      }
      if (!is_send(a.kind)) continue;  // receives complete with their send
      const int q = peer_of(s, a.kind);
      if (q < 0 || q >= p) {
        sim.error = "stage " + std::to_string(s) + " sends past the end: " + to_string(a);
        return sim;
      }
      if (pc[size_t(q)] >= prog[size_t(q)].size()) continue;
      const PipelineAction b = prog[size_t(q)][pc[size_t(q)]];
      if (!is_recv(b.kind) || peer_of(q, b.kind) != s) continue;  // peer busy elsewhere
      if (!matches(a.kind, b.kind) || a.micro_batch != b.micro_batch) {
        sim.error = "stage " + std::to_string(s) + " " + to_string(a) + " meets stage " + std::to_string(q) + " " +
                    to_string(b);
        return sim;
      }
      ++pc[size_t(s)];
      ++pc[size_t(q)];
      progress = true;
    }
    if (done) return sim;
    if (!progress) {
      sim.deadlock = true;
      return sim;
    }
    ++sim.rounds;
  }
}

Simulation simulate(Schedule schedule, int p, int m) {
  std::vector<std::vector<PipelineAction>> prog;
  for (int s = 0; s < p; ++s) prog.push_back(pipeline_actions(schedule, p, s, m));
  return simulate(prog);
}

// Per stage: each forward and backward exactly once; forward before backward;
// an activation received before its forward, sent after; a gradient received
// before its backward, sent after.
void check_program(Schedule schedule, int p, int s, int m) {
  SCOPED_TRACE("schedule " + std::string(schedule_name(schedule)) + " p=" + std::to_string(p) + " stage " +
               std::to_string(s) + " m=" + std::to_string(m));
  const auto prog = pipeline_actions(schedule, p, s, m);
  std::map<std::pair<Kind, int>, int> at;
  for (int i = 0; i < int(prog.size()); ++i) {
    const auto key = std::make_pair(prog[size_t(i)].kind, prog[size_t(i)].micro_batch);
    EXPECT_EQ(at.count(key), 0u) << "repeated " << to_string(prog[size_t(i)]);
    at[key] = i;
  }
  const bool first = s == 0, last = s == p - 1;
  const size_t per_mb = 2 + (first ? 0 : 2) + (last ? 0 : 2);
  EXPECT_EQ(prog.size(), per_mb * size_t(m));
  for (int j = 0; j < m; ++j) {
    ASSERT_TRUE(at.count({Kind::forward, j}) && at.count({Kind::backward, j})) << "micro-batch " << j;
    EXPECT_LT((at[{Kind::forward, j}]), (at[{Kind::backward, j}]));
    if (!first) {
      EXPECT_LT((at[{Kind::recv_activation, j}]), (at[{Kind::forward, j}]));
      EXPECT_LT((at[{Kind::backward, j}]), (at[{Kind::send_gradient, j}]));
    }
    if (!last) {
      EXPECT_LT((at[{Kind::forward, j}]), (at[{Kind::send_activation, j}]));
      EXPECT_LT((at[{Kind::recv_gradient, j}]), (at[{Kind::backward, j}]));
    }
  }
}

TEST(PipelineScheduleTest, ProgramsRunEveryMicroBatchOnceInDependencyOrder) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 12; ++m)
        for (int s = 0; s < p; ++s) check_program(schedule, p, s, m);
}

TEST(PipelineScheduleTest, StagesCompleteWithBlockingMessages) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 20; ++m) {
        const Simulation sim = simulate(schedule, p, m);
        EXPECT_TRUE(sim.error.empty()) << schedule_name(schedule) << " p=" << p << " m=" << m << ": " << sim.error;
        EXPECT_FALSE(sim.deadlock) << schedule_name(schedule) << " p=" << p << " m=" << m;
      }
}

TEST(PipelineScheduleTest, SimulationDetectsCrossedSends) {
  // The naive steady state: both neighbours send before receiving.
  const std::vector<std::vector<PipelineAction>> crossed{
      {{Kind::forward, 1}, {Kind::send_activation, 1}, {Kind::recv_gradient, 0}},
      {{Kind::backward, 0}, {Kind::send_gradient, 0}, {Kind::recv_activation, 1}}};
  EXPECT_TRUE(simulate(crossed).deadlock);
  const std::vector<std::vector<PipelineAction>> ordered{
      {{Kind::forward, 1}, {Kind::send_activation, 1}, {Kind::recv_gradient, 0}},
      {{Kind::backward, 0}, {Kind::recv_activation, 1}, {Kind::send_gradient, 0}}};
  const Simulation sim = simulate(ordered);
  EXPECT_FALSE(sim.deadlock);
  EXPECT_TRUE(sim.error.empty()) << sim.error;
}

TEST(PipelineScheduleTest, OneFOneBBoundsLiveMicroBatchesByStageCount) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 20; ++m)
      for (int s = 0; s < p; ++s) {
        const int live = peak_live_micro_batches(pipeline_actions(Schedule::one_f_one_b, p, s, m));
        EXPECT_EQ(live, std::min(p - s, m)) << "p=" << p << " stage " << s << " m=" << m;
        EXPECT_EQ(peak_live_micro_batches(pipeline_actions(Schedule::gpipe, p, s, m)), m);
      }
}

TEST(PipelineScheduleTest, OneFOneBAlternatesInTheSteadyState) {
  // p=2, m=3, stage 0: warm-up one forward, then F B pairs, then the drain.
  std::vector<std::string> names;
  for (const auto& a : pipeline_actions(Schedule::one_f_one_b, 2, 0, 3))
    if (a.kind == Kind::forward || a.kind == Kind::backward) names.push_back(to_string(a));
  EXPECT_EQ(names, (std::vector<std::string>{"forward(0)", "forward(1)", "backward(0)", "forward(2)", "backward(1)",
                                             "backward(2)"}));
}

TEST(PipelineScheduleTest, BadShapesAreConfigErrors) {
  EXPECT_THROW(pipeline_actions(Schedule::gpipe, 0, 0, 1), ConfigError);
  EXPECT_THROW(pipeline_actions(Schedule::gpipe, 2, 2, 1), ConfigError);
  EXPECT_THROW(pipeline_actions(Schedule::one_f_one_b, 2, 0, 0), ConfigError);
  EXPECT_THROW(forward_actions(2, -1, 1), ConfigError);
}

}  // namespace
}  // namespace cohort::pipeline_schedule_test
