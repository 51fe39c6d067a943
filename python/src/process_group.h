// ProcessGroupCohort: the torch.distributed backend "cohort" (LibTorch 1.13's
// c10d::ProcessGroup interface).
//
// THE ONE FILE (with process_group.cc) THAT DEPENDS ON THE TORCH VERSION.
// LibTorch 2.x moved a backend's collectives from c10d::ProcessGroup to
// c10d::Backend (the ProcessGroup then dispatches to it) and changed how a
// plugin registers; a port derives this class from c10d::Backend and binds
// it as 2.x's register_backend expects. Everything it calls is torch-version
// free: GroupWorld (the communicator and engine), GroupCollectives (c10d's
// collectives as engine ops), CompletionThread (the Work's completion).
//
// Supported: broadcast, allreduce, allreduce_coalesced, reduce, allgather,
// _allgather_base, allgather_coalesced, gather, scatter, reduce_scatter,
// _reduce_scatter_base, alltoall_base, alltoall, barrier; reduce ops SUM,
// AVG, PRODUCT, MIN, MAX; CPU tensors of the dtypes cohort moves. Not
// supported (a RuntimeError naming the op): send, recv, recvAnysource
// (cohort's engine runs collectives only), monitoredBarrier, BAND/BOR/BXOR
// and PREMUL_SUM, CUDA tensors.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>

#include "python/src/completion_thread.h"
#include "python/src/group_collectives.h"
#include "python/src/group_world.h"

namespace pybind11 {
class module_;
}

namespace cohort::python {

class ProcessGroupCohort : public ::c10d::ProcessGroup {
 public:
  // Collective over the group (see GroupWorld).
  ProcessGroupCohort(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  // close(), without the GIL when this thread holds it.
  ~ProcessGroupCohort() override;

  // Finishes the group's ops and stops its engine (collective, as the
  // engine's shutdown); later ops raise. Idempotent. The engine's and the
  // completion thread's last references to the caller's tensors go here,
  // and freeing a Python tensor takes the GIL: the caller must not hold it,
  // and the interpreter must not be finalizing (CPython ends a thread that
  // takes the GIL then, and the unwinding aborts the process). So
  // `import cohort` registers close_all() with Python's atexit, which runs
  // before finalization.
  void close();
  // close() on every group alive in this process.
  static void close_all();

  const std::string getBackendName() const override { return "cohort"; }
  // Which of cohort's communicators carries the group ("shm", "gloo", ...).
  const std::string& communicator_backend() const { return world_->backend(); }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors, const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs, const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  c10::intrusive_ptr<::c10d::Work> launch(::c10d::OpType type, Pending pending);
  GroupCollectives& collectives();  // ConfigError once closed

  std::unique_ptr<GroupWorld> world_;
  std::unique_ptr<GroupCollectives> collectives_;
  std::unique_ptr<CompletionThread> completions_;  // declared last: finishes (and goes) first
  std::atomic<uint64_t> sequence_{0};
};

// Binds ProcessGroupCohort into `module` as a subclass of torch's
// ProcessGroup (what register_backend's creator returns).
void bind_process_group(pybind11::module_& module);

}  // namespace cohort::python
