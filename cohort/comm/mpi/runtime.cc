#include "cohort/comm/mpi/runtime.h"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // OpenMPI's extensions (ULFM's MPIX_ERR_PROC_FAILED when built with it)
#endif

#include <cstdlib>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"

namespace cohort::comm::mpi {
namespace {

std::mutex g_init_mutex;
bool g_owned = false;
int g_level = MPI_THREAD_SINGLE;
std::recursive_mutex g_call_mutex;

void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

}  // namespace

void ensure_initialized() {
  std::lock_guard lock(g_init_mutex);
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) {
    int done = 0;
    MPI_Finalized(&done);
    COHORT_CHECK_AS(ConfigError, !done) << "MPI was already finalized in this process";
    MPI_Query_thread(&g_level);
    return;
  }
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_level);
  COHORT_CHECK_AS(ConfigError, rc == MPI_SUCCESS) << "MPI_Init_thread failed: " << error_text(rc);
  g_owned = true;
  std::atexit(finalize_at_exit);
  if (g_level < MPI_THREAD_MULTIPLE)
    COHORT_LOG(info) << "MPI provides thread level " << g_level
                     << " below MPI_THREAD_MULTIPLE; cohort serialises its MPI calls";
}

bool initialized_by_cohort() { return g_owned; }

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

int thread_level() { return g_level; }

std::unique_lock<std::recursive_mutex> call_lock() {
  if (g_level >= MPI_THREAD_MULTIPLE) return {};
  return std::unique_lock(g_call_mutex);
}

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

bool is_process_failure(int code) {
#ifdef MPIX_ERR_PROC_FAILED
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  return error_class == MPIX_ERR_PROC_FAILED;
#else
  (void)code;
  return false;
#endif
}

}  // namespace cohort::comm::mpi
