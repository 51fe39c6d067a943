// Every rank contributes a tensor of rank + 1; prints the summed element.
// Written as a newcomer would: the one include, `using namespace cohort;`
// next to LibTorch code (torch:: must still mean LibTorch), a torch::data
// loader over this rank's shard, and no C++ standard set by the project.
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdio>

using namespace cohort;

int main() {
  init();
  torch::Tensor t = torch::full({3}, double(rank() + 1), torch::kFloat64);
  t = allreduce(t, {.op = ReduceOp::sum});

  // The sampler splits 10 examples over the ranks; the loader reads them.
  auto dataset = torch::data::datasets::TensorDataset(torch::arange(10).unsqueeze(1))
                     .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  DistributedSampler sampler({.dataset_size = 10});
  auto loader = torch::data::make_data_loader(std::move(dataset), sampler, /*batch_size=*/4);
  int64_t rows = 0;
  for (auto& batch : *loader) rows += batch.data.size(0);
  const int64_t all_rows = allreduce(torch::tensor({rows}), {.op = ReduceOp::sum}).item<int64_t>();

  std::printf("torch rank %d of %d: rows %lld of 10\n", rank(), size(), static_cast<long long>(all_rows));
  std::printf("torch rank %d of %d: sum %g\n", rank(), size(), t[0].item<double>());
  shutdown();
}
