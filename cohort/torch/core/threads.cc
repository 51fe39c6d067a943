#include "cohort/torch/core/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include "cohort/common/check.h"

namespace cohort {
namespace {

// Looked up in the global scope: LibTorch links the BLAS as a dependency of
// the program, so its symbols are there when it is OpenBLAS.
template <typename Fn>
Fn* openblas_function(const char* name) {
  return reinterpret_cast<Fn*>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void set_intra_op_threads(int n) {
  COHORT_CHECK_AS(ConfigError, n >= 1) << "intra-op threads must be at least 1, got " << n;
  at::set_num_threads(n);
  if (auto* set = openblas_function<void(int)>("openblas_set_num_threads")) set(n);
}

int blas_threads() {
  auto* get = openblas_function<int()>("openblas_get_num_threads");
  return get ? get() : -1;
}

}  // namespace cohort
