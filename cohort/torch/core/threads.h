// Intra-op threads of this process: LibTorch's pool and the BLAS's.
//
// at::set_num_threads() sizes LibTorch's OpenMP pool, but Debian's LibTorch
// runs its matrix products on OpenBLAS, whose pthread build
// (libopenblas0-pthread) keeps a pool of its own sized by
// OPENBLAS_NUM_THREADS or, unset, the core count. "One thread per rank"
// then still runs every GEMM on all cores. set_intra_op_threads() sets both.
#pragma once

namespace cohort {

// n >= 1 (ConfigError otherwise). Sets OpenBLAS's pool when the process's
// BLAS is OpenBLAS, found by symbol in the global scope (a program linked
// against LibTorch; not a LibTorch dlopen'ed with RTLD_LOCAL, as Python's);
// another BLAS is left to its own variables (MKL_NUM_THREADS, ...).
void set_intra_op_threads(int n);

// The BLAS's pool size: OpenBLAS's when found, else -1.
int blas_threads();

}  // namespace cohort
