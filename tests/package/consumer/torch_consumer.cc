// Every rank contributes a tensor of rank + 1; prints the summed element.
#include <torch/torch.h>

#include <cstdio>

#include "cohort/torch/collectives.h"
#include "cohort/torch/runtime.h"

int main() {
  cohort::torch::init();
  at::Tensor t = torch::full({3}, double(cohort::torch::rank() + 1), torch::kFloat64);
  t = cohort::torch::allreduce(t, {.op = cohort::ReduceOp::sum});
  std::printf("torch rank %d of %d: sum %g\n", cohort::torch::rank(), cohort::torch::size(), t[0].item<double>());
  cohort::torch::shutdown();
}
