// set_intra_op_threads sizes both LibTorch's pool and OpenBLAS's (which
// at::set_num_threads alone leaves at OPENBLAS_NUM_THREADS or the core count).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/common/error.h"
#include "cohort/torch/core/threads.h"

namespace cohort::testing::threads_test {
namespace {

TEST(IntraOpThreads, SetsLibTorchsPoolAndOpenBlassPool) {
  cohort::set_intra_op_threads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
  if (cohort::blas_threads() < 0) GTEST_SKIP() << "this LibTorch's BLAS is not OpenBLAS";
  EXPECT_EQ(cohort::blas_threads(), 1);
  cohort::set_intra_op_threads(2);
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_EQ(cohort::blas_threads(), 2);
  cohort::set_intra_op_threads(1);
  EXPECT_EQ(cohort::blas_threads(), 1);
}

TEST(IntraOpThreads, AtLeastOne) {
  EXPECT_THROW(cohort::set_intra_op_threads(0), ConfigError);
}

}  // namespace
}  // namespace cohort::testing::threads_test
