// TensorHandle: the caller's side of one asynchronous tensor collective.
//
//   auto h = cohort::allreduce_async(grad, {.name = "grad/fc1"});
//   ...                      // overlap other work
//   at::Tensor sum = h.wait();
//
// wait() blocks until the op is done, rethrows its error (a cohort::Error
// naming the op), finishes the op on the caller's thread (copies back into a
// non-contiguous input, drops padding) and returns the result; later calls
// return the same tensor. Copies of a handle share the op. Dropping a handle
// without waiting is allowed: the engine still completes the op, and the
// buffers it uses are kept alive until then.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/handle.h"

namespace cohort {

class TensorHandle {
 public:
  // Waits for `pending` (in order), then runs `finish` once to produce the
  // result. `keep_alive` holds the tensors the engine reads or writes.
  struct Parts {
    std::string name;
    std::vector<engine::Handle> pending;
    std::function<at::Tensor()> finish;
    std::vector<at::Tensor> keep_alive;
    std::vector<int64_t> received_splits;  // alltoall
  };
  // Multi-stage ops run on a thread of their own, so that each stage is
  // submitted as soon as the previous one completes, whatever order the
  // caller waits in. `run` returns the result and sets the received splits.
  using Deferred = std::function<at::Tensor(std::vector<int64_t>& received_splits)>;

  TensorHandle() = default;
  explicit TensorHandle(Parts parts);
  static TensorHandle deferred(std::string name, Deferred run);

  bool valid() const { return state_ != nullptr; }
  const std::string& name() const;

  at::Tensor wait();
  // True when the op has finished (successfully or not); never throws.
  bool poll() const;

  // alltoall: the number of dim-0 rows received from each rank (after wait()).
  const std::vector<int64_t>& received_splits() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cohort
