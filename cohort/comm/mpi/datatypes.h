// cohort's DTypes and ReduceOps as MPI handles.
//
// Native types use MPI's own types and operations (MPI_FLOAT with MPI_SUM,
// ...). f16 and bf16 travel as MPI_UINT16_T and reduce with user operations
// that run cohort's kernels (widened to f32, rounded once). avg maps to the
// sum; the caller divides afterwards (finish_average).
//
// Internal to cohort_comm: the header includes mpi.h.
#pragma once

#include <mpi.h>

#include "cohort/common/dtype.h"
#include "cohort/common/reduce_op.h"

namespace cohort::comm::mpi {

MPI_Datatype datatype_of(DType dtype);

// The operation for `op` on `dtype`; user operations are created on first
// use and live until MPI_Finalize.
MPI_Op operation_of(DType dtype, ReduceOp op);

}  // namespace cohort::comm::mpi
