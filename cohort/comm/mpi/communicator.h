// The mpi communicator: the ranks of an MPI job (OpenMPI, MPICH), started by
// mpirun or srun.
//
// The world communicator duplicates MPI_COMM_WORLD, so cohort's traffic
// never matches the program's own MPI messages; split() is MPI_Comm_split.
// MPI is initialised on first use unless the program did it, and finalised
// at exit only when cohort initialised it (see runtime.h).
//
// Operations are MPI's nonblocking collectives (MPI_Iallreduce, ...) and
// MPI_Isend/MPI_Irecv, completed by a test loop that also enforces the
// timeout and watches for an abort from a failing peer. Reductions use MPI's
// operations on native types and cohort's kernels for f16/bf16 (user
// operations); avg is a sum and then finish_average, and for f16/bf16 runs
// in f32 (f32_average.h). Collectives whose
// blocks or displacements exceed 2^31-1 elements raise Error (MPI counts are
// int); allreduce, broadcast, send and recv split larger messages.
//
// Agreement (Options::verify, COHORT_MPI_VERIFY): before each collective the
// ranks allreduce a 16-byte signature of the call (sequence number, kind,
// dtype, count, op, root); on a difference every rank raises MismatchError
// listing which ranks made which call, instead of running MPI into undefined
// behaviour. send/recv carry a 32-byte header (tag, dtype, count), with the
// payload up to Options::eager_bytes; the receiver probes before receiving
// and checks the header, so it never posts a buffer shorter than the message
// (MPI_ERR_TRUNCATE, which OpenMPI's shared-memory transport reports only
// after writing past the buffer).
//
// Failures: MPI errors (MPI_ERRORS_RETURN) raise Error with MPI's error
// string (PeerLostError for a process failure where the MPI reports one;
// OpenMPI's mpirun instead ends the whole job when a rank dies). A timeout
// raises TimeoutError. A rank that fails, or whose communicator is
// destroyed by an exception, sends an abort to its peers on a private
// duplicate communicator, so that they raise the matching error at once
// rather than at their timeout. After a failure the communicator is
// unusable.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"

namespace cohort::comm::mpi {

struct Options {
  std::chrono::milliseconds timeout{300000};
  bool verify = true;              // agree on each collective's signature first
  size_t eager_bytes = 16 * 1024;  // p2p payloads sent with their header
  int eager_window = 4;            // buffered sends per peer
  // World rank of each member, for messages; empty means identity.
  std::vector<int> world_ranks;
};

// The options from the COHORT_* tunables (COHORT_TIMEOUT_S,
// COHORT_MPI_VERIFY).
Options options_from_env();

// True when this process was started by an MPI launcher that MPI_Init will
// join to its peers (OpenMPI's mpirun, Slurm's srun, MPICH's hydra), judged
// from the environment without initialising MPI.
bool launched_by_mpi();

class Communicator final : public comm::Communicator {
 public:
  // All ranks of the MPI job (MPI_COMM_WORLD, duplicated). Collective.
  explicit Communicator(Options options = options_from_env());
  ~Communicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "mpi"; }

  void allreduce(BufferView send, BufferView recv, const AllreduceOptions& options = {}) override;
  using comm::Communicator::allreduce;
  void broadcast(BufferView buffer, int root) override;
  void allgather(BufferView send, BufferView recv) override;
  void allgatherv(BufferView send, BufferView recv, std::span<const size_t> counts) override;
  void reduce_scatter(BufferView send, BufferView recv, const ReduceScatterOptions& options = {}) override;
  void alltoall(BufferView send, BufferView recv) override;
  void alltoallv(BufferView send, std::span<const size_t> send_counts, BufferView recv,
                 std::span<const size_t> recv_counts) override;
  void gather(BufferView send, BufferView recv, int root) override;
  void scatter(BufferView send, BufferView recv, int root) override;
  void barrier() override;
  void send(BufferView buffer, int dst, uint32_t tag) override;
  void recv(BufferView buffer, int src, uint32_t tag) override;
  std::unique_ptr<comm::Communicator> split(int color, int key) override;

 private:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::comm::mpi
