#include "python/src/horovod_ops.h"

#include <torch/csrc/utils/pybind.h>

#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"

namespace cohort::python {

void bind_horovod_ops(pybind11::module_& m) {
  namespace py = pybind11;
  using py::arg;
  const auto no_gil = py::call_guard<py::gil_scoped_release>();

  // ---- the runtime (cohort/torch/core/runtime.h) ----
  m.def(
      "init", [] { cohort::init(); }, no_gil,
      "Joins the job that cohortrun, torchrun, mpirun or srun started (a single process when none did): "
      "builds the world communicator and engine. Collective.");
  m.def("shutdown", &cohort::shutdown, no_gil, "Stops the world engine (collective). No-op when not initialized.");
  m.def("initialized", &cohort::initialized);
  m.def("rank", [] { return cohort::rank(); });
  m.def("size", [] { return cohort::size(); });
  m.def("local_rank", &cohort::local_rank);
  m.def("local_size", &cohort::local_size);
  m.def("elastic", &cohort::elastic, "Whether this process belongs to an elastic job (cohortrun --min-np).");
  m.def("reform", &cohort::reform, no_gil,
        "Forms the next membership epoch's world (collective over its members); raises MembershipEnded or "
        "ElasticLeave.");
  m.def("membership_changed", &cohort::membership_changed, no_gil);
  m.def("elastic_joining", &cohort::elastic_joining);
  m.def("finish_joining", &cohort::finish_joining);

  // ---- ops on the runtime's engine (cohort/torch/core/collectives.h) ----
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::sum)
      .value("AVG", ReduceOp::avg)
      .value("MIN", ReduceOp::min)
      .value("MAX", ReduceOp::max)
      .value("PRODUCT", ReduceOp::product);

  py::class_<TensorHandle>(m, "Handle", "One asynchronous collective: wait() for its result, poll() to test.")
      .def("wait", &TensorHandle::wait, no_gil,
           "Blocks until the op is done and returns its result (the same tensor on every call); raises its error.")
      .def("poll", &TensorHandle::poll, "True once the op has finished, successfully or not.")
      .def("received_splits", &TensorHandle::received_splits, "alltoall: rows received from each rank (after wait).")
      .def_property_readonly("name", &TensorHandle::name);

  m.def(
      "allreduce_async",
      [](const at::Tensor& t, std::string name, ReduceOp op, double prescale, double postscale, bool inplace) {
        AllreduceOptions o{.name = std::move(name), .op = op, .prescale = prescale, .postscale = postscale};
        return inplace ? allreduce_async_(t, o) : allreduce_async(t, o);
      },
      arg("tensor"), arg("name") = "", arg("op") = ReduceOp::avg, arg("prescale") = 1.0, arg("postscale") = 1.0,
      arg("inplace") = false, no_gil);
  m.def(
      "allgather_async",
      [](const at::Tensor& t, std::string name) { return allgather_async(t, {.name = std::move(name)}); },
      arg("tensor"), arg("name") = "", no_gil);
  m.def(
      "broadcast_async",
      [](const at::Tensor& t, int root, std::string name, bool inplace) {
        BroadcastOptions o{.name = std::move(name), .root = root};
        return inplace ? broadcast_async_(t, o) : broadcast_async(t, o);
      },
      arg("tensor"), arg("root"), arg("name") = "", arg("inplace") = false, no_gil);
  m.def(
      "alltoall_async",
      [](const at::Tensor& t, std::vector<int64_t> splits, std::string name) {
        return alltoall_async(t, {.name = std::move(name), .splits = std::move(splits)});
      },
      arg("tensor"), arg("splits") = std::vector<int64_t>{}, arg("name") = "", no_gil);
  m.def(
      "reducescatter_async",
      [](const at::Tensor& t, std::string name, ReduceOp op, double prescale, double postscale) {
        return reduce_scatter_async(t,
                                    {.name = std::move(name), .op = op, .prescale = prescale, .postscale = postscale});
      },
      arg("tensor"), arg("name") = "", arg("op") = ReduceOp::avg, arg("prescale") = 1.0, arg("postscale") = 1.0,
      no_gil);
  m.def(
      "barrier", [](std::string name) { cohort::barrier({.name = std::move(name)}); }, arg("name") = "", no_gil);
  m.def(
      "join", [] { return cohort::join(); }, no_gil,
      "This rank has no more work; returns the last rank to join once every rank has.");
}

}  // namespace cohort::python
