#include "cohort/comm/mpi/datatypes.h"

#include <array>
#include <mutex>

#include "cohort/comm/mpi/runtime.h"
#include "cohort/common/check.h"
#include "cohort/common/reduce.h"

namespace cohort::comm::mpi {
namespace {

// MPI's user functions get no context, so each (dtype, op) has its own
// instantiation. inout = in op inout; cohort's kernels allow the destination
// to alias the first source.
template <DType D, ReduceOp Op>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce2(Op, D, inout, inout, in, static_cast<size_t>(*len));
}

template <DType D>
MPI_User_function* half_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return &reduce_half<D, ReduceOp::sum>;
    case ReduceOp::min: return &reduce_half<D, ReduceOp::min>;
    case ReduceOp::max: return &reduce_half<D, ReduceOp::max>;
    case ReduceOp::product: return &reduce_half<D, ReduceOp::product>;
  }
  return nullptr;
}

}  // namespace

MPI_Datatype datatype_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16: case DType::bf16: return MPI_UINT16_T;
    case DType::i8: return MPI_INT8_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  COHORT_THROW(Error) << "no MPI datatype for dtype " << int(dtype);
}

MPI_Op operation_of(DType dtype, ReduceOp op) {
  if (dtype != DType::f16 && dtype != DType::bf16) {
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: return MPI_SUM;
      case ReduceOp::min: return MPI_MIN;
      case ReduceOp::max: return MPI_MAX;
      case ReduceOp::product: return MPI_PROD;
    }
  }
  static std::mutex mutex;
  static std::array<MPI_Op, 2 * std::size(kAllReduceOps)> created = [] {
    std::array<MPI_Op, 2 * std::size(kAllReduceOps)> a;
    a.fill(MPI_OP_NULL);
    return a;
  }();
  std::lock_guard lock(mutex);
  MPI_Op& slot = created[(dtype == DType::bf16 ? std::size(kAllReduceOps) : 0) + size_t(op)];
  if (slot == MPI_OP_NULL) {
    MPI_User_function* fn = dtype == DType::f16 ? half_function<DType::f16>(op) : half_function<DType::bf16>(op);
    auto mpi_lock = call_lock();
    const int rc = MPI_Op_create(fn, /*commute=*/1, &slot);
    COHORT_CHECK(rc == MPI_SUCCESS) << "MPI_Op_create: " << error_text(rc);
  }
  return slot;
}

}  // namespace cohort::comm::mpi
