// Test support: gtest assertions on the jobs of ps_job.h.
#pragma once

#include <gtest/gtest.h>

#include "tests/parameter_server/ps_job.h"

namespace cohort::ps::testing {

// w, then emb: the order ps_rank_program writes them in.
inline std::vector<double> flat(const ReferenceResult& r) {
  std::vector<double> v = r.w;
  v.insert(v.end(), r.emb.begin(), r.emb.end());
  return v;
}

// The largest difference of an element of `got` (flat()'s order) from `r`.
inline double worst_difference(const std::vector<double>& got, const ReferenceResult& r) {
  const std::vector<double> want = flat(r);
  double worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst;
}

// `got` (w, then emb, as ps_rank_program writes them) equals the reference.
inline void expect_matches(const std::vector<double>& got, const ReferenceResult& r, const std::string& what) {
  ASSERT_EQ(got.size(), r.w.size() + r.emb.size()) << what;
  EXPECT_LE(worst_difference(got, r), 1e-12) << what;
}

inline void expect_reference(const PsJob& job, int worker, const ReferenceResult& r) {
  expect_matches(job.result(worker), r, "worker " + std::to_string(worker));
}

inline void expect_exit(const Outcome& o, int rank, int code) {
  EXPECT_EQ(o.problems, "");
  ASSERT_TRUE(WIFEXITED(o.status[rank])) << "rank " << rank << ":\n" << o.output[rank];
  EXPECT_EQ(WEXITSTATUS(o.status[rank]), code) << "rank " << rank << ":\n" << o.output[rank];
}

inline void expect_killed(const Outcome& o, int rank) {
  ASSERT_TRUE(WIFSIGNALED(o.status[rank])) << "rank " << rank << ":\n" << o.output[rank];
  EXPECT_EQ(WTERMSIG(o.status[rank]), SIGKILL);
}

}  // namespace cohort::ps::testing
