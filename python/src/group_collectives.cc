#include "python/src/group_collectives.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <numeric>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"

namespace cohort::python {
namespace {

// The flat view of a tensor's elements that the engine moves (copied when
// the tensor is not contiguous; the finish copies results back).
at::Tensor flat(const at::Tensor& t) { return t.reshape({-1}); }

void check_list(const char* op, const char* what, size_t got, int want) {
  COHORT_CHECK_AS(ConfigError, got == size_t(want)) << "torch.distributed backend \"cohort\": " << op << " takes "
                                                    << want << " " << what << " (one per rank), got " << got;
}

void check_numel(const char* op, const at::Tensor& t, int64_t want) {
  COHORT_CHECK_AS(ConfigError, t.numel() == want)
      << "torch.distributed backend \"cohort\": " << op << " needs tensors of " << want << " elements, got one of "
      << t.numel() << " (shape " << t.sizes() << ")";
}

// Copies `blocks` (flat, consecutive, `sizes[i]` elements each) of `from`
// into the tensors `to`.
void scatter_blocks(const at::Tensor& from, const std::vector<at::Tensor>& to) {
  int64_t offset = 0;
  for (const at::Tensor& t : to) {
    t.copy_(from.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void Pending::complete() {
  std::vector<at::Tensor> results;
  results.reserve(handles.size());
  for (TensorHandle& h : handles) results.push_back(h.wait());
  if (finish) finish(results);
}

Pending GroupCollectives::allreduce(const std::vector<at::Tensor>& tensors, ReduceOp op) {
  Pending p;
  for (const at::Tensor& t : tensors) p.handles.push_back(allreduce_async_(t, {.op = op, .engine = engine()}));
  p.outputs = tensors;
  return p;
}

Pending GroupCollectives::broadcast(const std::vector<at::Tensor>& tensors, int root) {
  Pending p;
  for (const at::Tensor& t : tensors) p.handles.push_back(broadcast_async_(t, {.root = root, .engine = engine()}));
  p.outputs = tensors;
  return p;
}

Pending GroupCollectives::reduce(const std::vector<at::Tensor>& tensors, int root, ReduceOp op) {
  Pending p;
  for (const at::Tensor& t : tensors) p.handles.push_back(allreduce_async(t, {.op = op, .engine = engine()}));
  const bool is_root = rank() == root;
  p.finish = [tensors, is_root](std::vector<at::Tensor>& results) {
    if (!is_root) return;
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(results[i]);
  };
  p.outputs = tensors;
  return p;
}

Pending GroupCollectives::allgather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  check_list("allgather", "output tensors", outputs.size(), size());
  for (const at::Tensor& o : outputs) check_numel("allgather", o, input.numel());
  Pending p;
  p.handles.push_back(allgather_async(flat(input), {.engine = engine()}));
  p.finish = [outputs](std::vector<at::Tensor>& results) { scatter_blocks(results[0], outputs); };
  p.outputs = outputs;
  return p;
}

Pending GroupCollectives::allgather_into(const at::Tensor& output, const at::Tensor& input) {
  check_numel("_allgather_base", output, input.numel() * size());
  Pending p;
  p.handles.push_back(allgather_async(flat(input), {.engine = engine()}));
  p.finish = [output](std::vector<at::Tensor>& results) { output.copy_(results[0].view(output.sizes())); };
  p.outputs = {output};
  return p;
}

Pending GroupCollectives::gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  if (rank() == root) {
    check_list("gather", "output tensors on the root", outputs.size(), size());
    for (const at::Tensor& o : outputs) check_numel("gather", o, input.numel());
  } else {
    COHORT_CHECK_AS(ConfigError, outputs.empty())
        << "torch.distributed backend \"cohort\": gather takes output tensors on the root (rank " << root
        << ") only; rank " << rank() << " passed " << outputs.size();
  }
  Pending p;
  p.handles.push_back(allgather_async(flat(input), {.engine = engine()}));
  p.finish = [outputs](std::vector<at::Tensor>& results) { scatter_blocks(results[0], outputs); };
  p.outputs = outputs;
  return p;
}

Pending GroupCollectives::scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  // One broadcast of root's inputs end to end; each rank keeps its block.
  at::Tensor all;
  if (rank() == root) {
    check_list("scatter", "input tensors on the root", inputs.size(), size());
    for (const at::Tensor& i : inputs) check_numel("scatter", i, output.numel());
    std::vector<at::Tensor> flats;
    for (const at::Tensor& i : inputs) flats.push_back(flat(i));
    all = at::cat(flats);
  } else {
    COHORT_CHECK_AS(ConfigError, inputs.empty())
        << "torch.distributed backend \"cohort\": scatter takes input tensors on the root (rank " << root
        << ") only; rank " << rank() << " passed " << inputs.size();
    all = at::empty({output.numel() * size()}, output.options());
  }
  Pending p;
  p.handles.push_back(broadcast_async_(all, {.root = root, .engine = engine()}));
  const int64_t offset = output.numel() * rank();
  p.finish = [output, offset](std::vector<at::Tensor>& results) {
    output.copy_(results[0].narrow(0, offset, output.numel()).view(output.sizes()));
  };
  p.outputs = {output};
  return p;
}

Pending GroupCollectives::reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op) {
  check_list("reduce_scatter", "input tensors", inputs.size(), size());
  std::vector<at::Tensor> flats;
  for (const at::Tensor& i : inputs) {
    check_numel("reduce_scatter", i, output.numel());
    flats.push_back(flat(i));
  }
  return reduce_scatter_flat(output, at::cat(flats), op);
}

Pending GroupCollectives::reduce_scatter_flat(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  check_numel("reduce_scatter", input, output.numel() * size());
  Pending p;
  // size() blocks of output.numel() rows: the engine's split gives block r to rank r.
  p.handles.push_back(reduce_scatter_async(flat(input), {.op = op, .engine = engine()}));
  p.finish = [output](std::vector<at::Tensor>& results) { output.copy_(results[0].view(output.sizes())); };
  p.outputs = {output};
  return p;
}

Pending GroupCollectives::alltoall_flat(const at::Tensor& output, const at::Tensor& input,
                                        std::vector<int64_t> output_splits, std::vector<int64_t> input_splits) {
  if (!input_splits.empty()) check_list("alltoall_base", "input split sizes", input_splits.size(), size());
  if (!output_splits.empty()) check_list("alltoall_base", "output split sizes", output_splits.size(), size());
  Pending p;
  p.handles.push_back(alltoall_async(input, {.splits = std::move(input_splits), .engine = engine()}));
  p.finish = [output, output_splits, op_rank = rank()](std::vector<at::Tensor>& results) {
    const at::Tensor& got = results[0];
    COHORT_CHECK_AS(ConfigError, got.numel() == output.numel())
        << "torch.distributed backend \"cohort\": alltoall_base on rank " << op_rank << " received " << got.numel()
        << " elements (" << got.size(0) << " rows) for an output of " << output.numel() << " (output split sizes "
        << at::IntArrayRef(output_splits) << ")";
    output.copy_(got.view(output.sizes()));
  };
  p.outputs = {output};
  return p;
}

Pending GroupCollectives::alltoall(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  check_list("alltoall", "input tensors", inputs.size(), size());
  check_list("alltoall", "output tensors", outputs.size(), size());
  std::vector<at::Tensor> flats;
  std::vector<int64_t> splits;
  for (const at::Tensor& i : inputs) {
    flats.push_back(flat(i));
    splits.push_back(i.numel());
  }
  Pending p;
  p.handles.push_back(alltoall_async(at::cat(flats), {.splits = std::move(splits), .engine = engine()}));
  p.finish = [outputs](std::vector<at::Tensor>& results) {
    const int64_t want = std::accumulate(outputs.begin(), outputs.end(), int64_t{0},
                                         [](int64_t n, const at::Tensor& t) { return n + t.numel(); });
    check_numel("alltoall", results[0], want);
    scatter_blocks(results[0], outputs);
  };
  p.outputs = outputs;
  return p;
}

Pending GroupCollectives::barrier() {
  Pending p;
  p.handles.push_back(
      TensorHandle({.name = "barrier", .pending = {engine()->barrier_async()}, .finish = [] { return at::Tensor(); }}));
  return p;
}

}  // namespace cohort::python
