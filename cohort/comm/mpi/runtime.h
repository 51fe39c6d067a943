// The MPI library's lifetime in this process, and its errors.
//
// ensure_initialized() initialises MPI (asking for MPI_THREAD_MULTIPLE, as
// the engine calls collectives from its own thread) unless the program or
// another library already did, and in that case only registers an atexit
// handler that finalises it; a program that initialised MPI itself keeps
// ownership of MPI_Finalize. Communicators check finalized() before freeing
// their handles, so one that outlives MPI (a static) is harmless.
//
// Internal to cohort_comm: the header includes mpi.h.
#pragma once

#include <mpi.h>

#include <mutex>
#include <string>

namespace cohort::comm::mpi {

void ensure_initialized();
bool initialized_by_cohort();
bool finalized();

// The thread level MPI provides. Below MPI_THREAD_MULTIPLE, every MPI call
// cohort makes holds call_lock(), so that communicators used from different
// threads never call into MPI at the same time (recursive: error handling
// may call MPI while the lock is held).
int thread_level();
std::unique_lock<std::recursive_mutex> call_lock();

// "MPI_ERR_TRUNCATE: message truncated" for an error code.
std::string error_text(int code);

// True when `code`'s class means a process failed (ULFM's
// MPIX_ERR_PROC_FAILED where the MPI has it).
bool is_process_failure(int code);

}  // namespace cohort::comm::mpi
