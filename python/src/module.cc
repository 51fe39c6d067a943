// cohort._C: the extension module under the Python package `cohort`.
//
// cohort's errors become Python exceptions of the same names (every one a
// RuntimeError through CohortError); PeerLostError carries the lost rank as
// `.rank` (-1 when not known) and `.host`. The translation is registered
// with pybind11 globally, so errors thrown inside torch's own bindings (a
// Work's wait() on this backend) arrive the same way.
#include <torch/csrc/utils/pybind.h>

#include "cohort/comm/create.h"
#include "cohort/common/error.h"
#include "cohort/rendezvous/membership.h"
#include "python/src/horovod_ops.h"
#include "python/src/process_group.h"

#ifndef COHORT_VERSION_STRING
#define COHORT_VERSION_STRING "unknown"
#endif

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "cohort's engine for PyTorch: the torch.distributed backend and the ops under cohort.torch";
  m.attr("__version__") = COHORT_VERSION_STRING;

  auto& base = py::register_exception<cohort::Error>(m, "CohortError", PyExc_RuntimeError);
  py::register_exception<cohort::ConfigError>(m, "ConfigError", base);
  py::register_exception<cohort::TimeoutError>(m, "TimeoutError", base);
  py::register_exception<cohort::MismatchError>(m, "MismatchError", base);
  py::register_exception<cohort::rendezvous::MembershipEnded>(m, "MembershipEnded", base);
  py::register_exception<cohort::comm::ElasticLeave>(m, "ElasticLeave", base);
  // PeerLostError (and its subclasses) with the lost rank and host.
  static py::exception<cohort::PeerLostError> peer_lost(m, "PeerLostError", base);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cohort::PeerLostError& e) {
      py::object error = static_cast<py::object&>(peer_lost)(e.what());  // an instance, not raised yet
      error.attr("rank") = e.rank();
      error.attr("host") = e.host();
      PyErr_SetObject(peer_lost.ptr(), error.ptr());
    }
  });

  cohort::python::bind_horovod_ops(m);
  cohort::python::bind_process_group(m);
}
