#include "cohort/torch/data_parallel/comm_hooks.h"

#include <torch/torch.h>

#include <unordered_map>

#include "cohort/torch/core/tensor_view.h"
#include "cohort/torch/data_parallel/compression.h"

namespace cohort {
namespace {

class AllreduceHook final : public CommHook {
 public:
  explicit AllreduceHook(ReduceOp op) : op_(op) {}
  std::string name() const override { return "allreduce"; }
  void launch(GradBucket& bucket, engine::Engine& engine) override {
    BufferView v = view_of(bucket.buffer, "DistributedDataParallel bucket");
    // In place on the bucket: no scratch, no copy; a bucket above the fusion
    // threshold goes to the communicator as it is.
    handles_[bucket.index] = engine.submit_ordered_allreduce(v, v, {.op = op_});
  }
  bool averages_over_ranks() const override { return op_ == ReduceOp::avg; }
  void finish(GradBucket& bucket, engine::Engine&) override {
    auto it = handles_.find(bucket.index);
    engine::Handle h = std::move(it->second);
    handles_.erase(it);
    h.wait();
  }

 private:
  ReduceOp op_;
  std::unordered_map<size_t, engine::Handle> handles_;
};

class Fp16CompressHook final : public CommHook {
 public:
  std::string name() const override { return "fp16_compress"; }
  void launch(GradBucket& bucket, engine::Engine& engine) override {
    torch::NoGradGuard no_grad;
    Pending p;
    p.wire = compress(bucket.buffer, Compression::fp16);
    BufferView v = view_of(p.wire, "DistributedDataParallel fp16 bucket");
    p.handle = engine.submit_ordered_allreduce(v, v, {.op = ReduceOp::sum});
    pending_[bucket.index] = std::move(p);
  }
  void finish(GradBucket& bucket, engine::Engine&) override {
    auto it = pending_.find(bucket.index);
    Pending p = std::move(it->second);
    pending_.erase(it);
    p.handle.wait();
    torch::NoGradGuard no_grad;
    bucket.buffer.copy_(p.wire);
  }

 private:
  struct Pending {
    at::Tensor wire;
    engine::Handle handle;
  };
  std::unordered_map<size_t, Pending> pending_;
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllreduceHook>(ReduceOp::avg); }

std::shared_ptr<CommHook> sum_allreduce_hook() { return std::make_shared<AllreduceHook>(ReduceOp::sum); }
std::shared_ptr<CommHook> fp16_compress_hook() { return std::make_shared<Fp16CompressHook>(); }

}  // namespace cohort
