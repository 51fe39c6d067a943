// Tensors between pipeline stages: point-to-point messages that carry their
// own shape and dtype, so the receiver allocates and checks instead of
// trusting a convention.
//
// A message is a fixed-size header (kind, micro-batch index and count, rows
// of the whole batch, dtype, shape), then the tensor's elements (none when it
// has no element). The receiver checks the header against what its schedule
// expects (kind, micro-batch, micro-batch count, and, where known, dtype and
// shape) and throws MismatchError naming both stages and the micro-batch; the
// sender's message is then left untaken, and the caller's exception unwinds
// its communicator, which aborts the group (see communicator.h), so the other
// stages fail too instead of waiting.
//
// Calls follow the communicator's rules: one thread, messages between two
// ranks matched in order.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"

namespace cohort {

enum class MessageKind : int32_t { activation = 1, gradient = 2, output = 3 };

const char* message_kind_name(MessageKind kind);

struct MessageHeader {
  MessageKind kind = MessageKind::activation;
  int32_t micro_batch = 0;
  int32_t micro_batches = 0;
  int64_t batch_rows = 0;  // rows of the whole batch on the first stage
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
};

// Up to this many dimensions travel in a header.
constexpr int kMaxMessageDims = 16;

// What a receiver expects; dtype and shape are checked only when set.
struct MessageExpectation {
  MessageKind kind = MessageKind::activation;
  int32_t micro_batch = 0;
  int32_t micro_batches = 0;
  std::optional<c10::ScalarType> dtype;
  std::optional<std::vector<int64_t>> shape;
  // For messages: "stage 2" (this rank) and "stage 1" (the peer).
  std::string self;
  std::string peer;
};

// Sends `tensor` (dense CPU, a cohort dtype; made contiguous here) with
// `header`'s kind, micro-batch fields and batch_rows; dtype and shape come
// from the tensor. Tag: kind (for the backends' own tag check).
void send_tensor(comm::Communicator& comm, int dst, const at::Tensor& tensor, MessageHeader header);

// Receives the next message from `src`, checks it against `expect` and
// returns the tensor with the header (through `header` when non-null).
at::Tensor recv_tensor(comm::Communicator& comm, int src, const MessageExpectation& expect,
                       MessageHeader* header = nullptr);

// Every rank gets root's tensor (shape and dtype included); collective.
at::Tensor broadcast_tensor(comm::Communicator& comm, const at::Tensor& tensor, int root);

}  // namespace cohort
