// The torch-version-dependent half of the backend (see process_group.h).
#include "python/src/process_group.h"

#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <set>

#include "cohort/common/check.h"

namespace cohort::python {
namespace {

[[noreturn]] void unsupported(const std::string& op, const std::string& why) {
  TORCH_CHECK(false, "torch.distributed backend \"cohort\" does not support ", op, ": ", why);
}

ReduceOp to_reduce_op(const ::c10d::ReduceOp& op, const char* collective) {
  switch (::c10d::ReduceOp::RedOpType(op)) {
    case ::c10d::ReduceOp::SUM: return ReduceOp::sum;
    case ::c10d::ReduceOp::AVG: return ReduceOp::avg;
    case ::c10d::ReduceOp::PRODUCT: return ReduceOp::product;
    case ::c10d::ReduceOp::MIN: return ReduceOp::min;
    case ::c10d::ReduceOp::MAX: return ReduceOp::max;
    default:
      unsupported(
          std::string("reduce op ") + std::to_string(int(::c10d::ReduceOp::RedOpType(op))) + " in " + collective,
          "it reduces with SUM, AVG, PRODUCT, MIN and MAX (BAND, BOR, BXOR and PREMUL_SUM are not built in)");
  }
}

void check_cpu(const std::vector<at::Tensor>& tensors, const char* collective) {
  for (const at::Tensor& t : tensors)
    if (!t.device().is_cpu())
      unsupported(std::string(collective) + " on " + t.device().str() + " tensors", "it moves CPU tensors");
}

// c10d's Work, completed by the group's CompletionThread.
class CohortWork : public ::c10d::Work {
 public:
  CohortWork(int rank, ::c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void done(std::exception_ptr error) {
    // The Work first (its waiters own the tensors), then the future, whose
    // callbacks (DDP's averaging) run on this thread.
    finish(error);
    if (error) future_->setError(error);
    else future_->markCompleted(c10::IValue(outputs_));
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

namespace {
std::mutex live_mutex;
std::set<ProcessGroupCohort*> live_groups;
}  // namespace

ProcessGroupCohort::ProcessGroupCohort(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size),
      world_(std::make_unique<GroupWorld>(*store, rank, size, timeout)),
      collectives_(std::make_unique<GroupCollectives>(*world_)),
      completions_(std::make_unique<CompletionThread>()) {
  std::lock_guard lock(live_mutex);
  live_groups.insert(this);
}

ProcessGroupCohort::~ProcessGroupCohort() {
  {
    std::lock_guard lock(live_mutex);
    live_groups.erase(this);
  }
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release no_gil;
    close();
  } else {
    close();
  }
}

void ProcessGroupCohort::close() {
  completions_.reset();  // finishes the ops submitted
  collectives_.reset();
  world_.reset();  // the engine's shutdown
}

void ProcessGroupCohort::close_all() {
  std::lock_guard lock(live_mutex);
  for (ProcessGroupCohort* group : live_groups) group->close();
}

GroupCollectives& ProcessGroupCohort::collectives() {
  COHORT_CHECK_AS(ConfigError, collectives_ != nullptr)
      << "torch.distributed backend \"cohort\": the process group was closed (at interpreter exit)";
  return *collectives_;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::launch(::c10d::OpType type, Pending pending) {
  ++sequence_;
  auto work = c10::make_intrusive<CohortWork>(rank_, type, pending.outputs);
  completions_->submit(std::move(pending), [work](std::exception_ptr error) { work->done(error); });
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::broadcast(std::vector<at::Tensor>& tensors,
                                                               const ::c10d::BroadcastOptions& opts) {
  check_cpu(tensors, "broadcast");
  return launch(::c10d::OpType::BROADCAST, collectives().broadcast(tensors, int(opts.rootRank)));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::allreduce(std::vector<at::Tensor>& tensors,
                                                               const ::c10d::AllreduceOptions& opts) {
  check_cpu(tensors, "allreduce");
  return launch(::c10d::OpType::ALLREDUCE, collectives().allreduce(tensors, to_reduce_op(opts.reduceOp, "allreduce")));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  check_cpu(tensors, "allreduce_coalesced");
  // The engine fuses small allreduces itself (COHORT_FUSION_THRESHOLD).
  return launch(::c10d::OpType::ALLREDUCE_COALESCED,
                collectives().allreduce(tensors, to_reduce_op(opts.reduceOp, "allreduce_coalesced")));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::reduce(std::vector<at::Tensor>& tensors,
                                                            const ::c10d::ReduceOptions& opts) {
  check_cpu(tensors, "reduce");
  return launch(::c10d::OpType::REDUCE,
                collectives().reduce(tensors, int(opts.rootRank), to_reduce_op(opts.reduceOp, "reduce")));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const ::c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "torch.distributed backend \"cohort\": allgather takes one input tensor and one output list per "
              "process (CPU), got ",
              inputs.size(), " and ", outputs.size());
  check_cpu(inputs, "allgather");
  return launch(::c10d::OpType::ALLGATHER, collectives().allgather(outputs[0], inputs[0]));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const ::c10d::AllgatherOptions&) {
  check_cpu({input, output}, "_allgather_base");
  return launch(::c10d::OpType::_ALLGATHER_BASE, collectives().allgather_into(output, input));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                         std::vector<at::Tensor>& inputs,
                                                                         const ::c10d::AllgatherOptions&) {
  check_cpu(inputs, "allgather_coalesced");
  // outputs[r][i] is rank r's inputs[i]: one allgather per input.
  TORCH_CHECK(outputs.size() == size_t(size_),
              "torch.distributed backend \"cohort\": allgather_coalesced takes one output list per rank (", size_,
              "), got ", outputs.size());
  Pending all;
  std::vector<std::function<void(std::vector<at::Tensor>&)>> finishes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> per_rank;
    for (auto& list : outputs) {
      TORCH_CHECK(list.size() == inputs.size(),
                  "torch.distributed backend \"cohort\": allgather_coalesced: an "
                  "output list holds ",
                  list.size(), " tensors for ", inputs.size(), " inputs");
      per_rank.push_back(list[i]);
    }
    Pending one = collectives().allgather(per_rank, inputs[i]);
    all.handles.push_back(std::move(one.handles[0]));
    all.outputs.insert(all.outputs.end(), per_rank.begin(), per_rank.end());
    finishes.push_back(std::move(one.finish));
  }
  all.finish = [finishes](std::vector<at::Tensor>& results) {
    for (size_t i = 0; i < finishes.size(); ++i) {
      std::vector<at::Tensor> result{results[i]};
      finishes[i](result);
    }
  };
  return launch(::c10d::OpType::ALLGATHER_COALESCED, std::move(all));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const ::c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "torch.distributed backend \"cohort\": gather takes one input tensor per process");
  check_cpu(inputs, "gather");
  std::vector<at::Tensor> none;
  return launch(::c10d::OpType::GATHER,
                collectives().gather(outputs.empty() ? none : outputs[0], inputs[0], int(opts.rootRank)));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const ::c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "torch.distributed backend \"cohort\": scatter takes one output tensor per process");
  check_cpu(outputs, "scatter");
  std::vector<at::Tensor> none;
  return launch(::c10d::OpType::SCATTER,
                collectives().scatter(outputs[0], inputs.empty() ? none : inputs[0], int(opts.rootRank)));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                                    const ::c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "torch.distributed backend \"cohort\": reduce_scatter takes one output tensor and one input list per "
              "process");
  check_cpu(outputs, "reduce_scatter");
  return launch(::c10d::OpType::REDUCE_SCATTER,
                collectives().reduce_scatter(outputs[0], inputs[0], to_reduce_op(opts.reduceOp, "reduce_scatter")));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                          const ::c10d::ReduceScatterOptions& opts) {
  check_cpu({input, output}, "_reduce_scatter_base");
  return launch(::c10d::OpType::_REDUCE_SCATTER_BASE,
                collectives().reduce_scatter_flat(output, input, to_reduce_op(opts.reduceOp, "reduce_scatter")));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_split_sizes,
                                                                   std::vector<int64_t>& input_split_sizes,
                                                                   const ::c10d::AllToAllOptions&) {
  check_cpu({input, output}, "alltoall_base");
  return launch(::c10d::OpType::ALLTOALL_BASE,
                collectives().alltoall_flat(output, input, output_split_sizes, input_split_sizes));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const ::c10d::AllToAllOptions&) {
  check_cpu(inputs, "alltoall");
  return launch(::c10d::OpType::ALLTOALL, collectives().alltoall(outputs, inputs));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::barrier(const ::c10d::BarrierOptions&) {
  return launch(::c10d::OpType::BARRIER, collectives().barrier());
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::send(std::vector<at::Tensor>&, int, int) {
  unsupported("send", "cohort's engine runs collectives only, not point-to-point messages (use gloo for send/recv)");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::recv(std::vector<at::Tensor>&, int, int) {
  unsupported("recv", "cohort's engine runs collectives only, not point-to-point messages (use gloo for send/recv)");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCohort::recvAnysource(std::vector<at::Tensor>&, int) {
  unsupported("recv from any source", "cohort's engine runs collectives only, not point-to-point messages");
}

void ProcessGroupCohort::monitoredBarrier(const ::c10d::BarrierOptions&, bool) {
  unsupported("monitored_barrier",
              "a plain barrier() already names a rank that died or never came (cohort's engine reports it)");
}

void ProcessGroupCohort::setSequenceNumberForGroup() { sequence_ = 0; }
uint64_t ProcessGroupCohort::getSequenceNumberForGroup() { return sequence_; }

void bind_process_group(pybind11::module_& module) {
  namespace py = pybind11;
  py::module_::import("torch.distributed");  // registers the ProcessGroup base with pybind11
  py::class_<ProcessGroupCohort, ::c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupCohort>>(
      module, "ProcessGroupCohort",
      "torch.distributed's backend \"cohort\": collectives on cohort's engine. Created by "
      "init_process_group(\"cohort\") through the creator that `import cohort` registers.")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupCohort>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("communicator", &ProcessGroupCohort::communicator_backend,
                             "The cohort communicator under the group: shm, gloo, mpi or hierarchical.");
  module.def("_close_process_groups", &ProcessGroupCohort::close_all, py::call_guard<py::gil_scoped_release>(),
             "Finishes every cohort group's ops and stops its engine (collective; `import cohort` registers it with "
             "atexit: see ProcessGroupCohort::close).");
}

}  // namespace cohort::python
