#include "cohort/torch/model_parallel/activation_channel.h"

#include <ATen/ATen.h>

#include <array>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {
namespace {

// Wire layout of a header, in int64 words.
constexpr int64_t kMagic = 0x636f68507065LL;  // "cohPpe"
enum Word : size_t {
  w_magic,
  w_kind,
  w_micro_batch,
  w_micro_batches,
  w_batch_rows,
  w_dtype,
  w_ndim,
  w_dims,
  w_words = w_dims + kMaxMessageDims
};
using Wire = std::array<int64_t, w_words>;

std::string shape_string(c10::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

Wire encode(const MessageHeader& h) {
  COHORT_CHECK_AS(ConfigError, h.shape.size() <= size_t(kMaxMessageDims))
      << "pipeline " << message_kind_name(h.kind) << " of micro-batch " << h.micro_batch << " has "
      << h.shape.size() << " dimensions; at most " << kMaxMessageDims << " can travel between stages";
  Wire w{};
  w[w_magic] = kMagic;
  w[w_kind] = int64_t(h.kind);
  w[w_micro_batch] = h.micro_batch;
  w[w_micro_batches] = h.micro_batches;
  w[w_batch_rows] = h.batch_rows;
  w[w_dtype] = int64_t(to_dtype(h.dtype, "pipeline message"));
  w[w_ndim] = int64_t(h.shape.size());
  for (size_t i = 0; i < h.shape.size(); ++i) w[w_dims + i] = h.shape[i];
  return w;
}

MessageHeader decode(const Wire& w, const std::string& where) {
  COHORT_CHECK_AS(MismatchError, w[w_magic] == kMagic && w[w_ndim] >= 0 && w[w_ndim] <= kMaxMessageDims)
      << where << ": received something that is not a pipeline message header";
  MessageHeader h;
  h.kind = MessageKind(w[w_kind]);
  h.micro_batch = int32_t(w[w_micro_batch]);
  h.micro_batches = int32_t(w[w_micro_batches]);
  h.batch_rows = w[w_batch_rows];
  h.dtype = to_scalar_type(DType(w[w_dtype]));
  h.shape.assign(w.begin() + w_dims, w.begin() + w_dims + w[w_ndim]);
  return h;
}

BufferView wire_view(Wire& w) { return BufferView{w.data(), w.size(), DType::i64}; }

}  // namespace

const char* message_kind_name(MessageKind kind) {
  switch (kind) {
    case MessageKind::activation: return "activation";
    case MessageKind::gradient: return "gradient";
    case MessageKind::output: return "output";
  }
  return "unknown message";
}

void send_tensor(comm::Communicator& comm, int dst, const at::Tensor& tensor, MessageHeader header) {
  const std::string what = std::string("pipeline ") + message_kind_name(header.kind) + " of micro-batch " +
                           std::to_string(header.micro_batch);
  check_tensor(tensor, what);
  const at::Tensor t = tensor.detach().contiguous();
  header.dtype = t.scalar_type();
  header.shape.assign(t.sizes().begin(), t.sizes().end());
  Wire w = encode(header);
  const uint32_t tag = uint32_t(header.kind);
  comm.send(wire_view(w), dst, tag);
  if (t.numel() > 0) comm.send(view_of(t, what), dst, tag);
}

at::Tensor recv_tensor(comm::Communicator& comm, int src, const MessageExpectation& expect, MessageHeader* out) {
  Wire w{};
  const uint32_t tag = uint32_t(expect.kind);
  const std::string where = expect.self + " receiving the " + message_kind_name(expect.kind) + " of micro-batch " +
                            std::to_string(expect.micro_batch) + " from " + expect.peer;
  comm.recv(wire_view(w), src, tag);
  const MessageHeader h = decode(w, where);
  COHORT_CHECK_AS(MismatchError, h.kind == expect.kind && h.micro_batch == expect.micro_batch &&
                                     h.micro_batches == expect.micro_batches)
      << where << " (" << expect.micro_batches << " micro-batches): " << expect.peer << " sent the "
      << message_kind_name(h.kind) << " of micro-batch " << h.micro_batch << " of " << h.micro_batches
      << "; the stages disagree on the schedule or the micro-batch count";
  if (expect.dtype) {
    COHORT_CHECK_AS(MismatchError, h.dtype == *expect.dtype)
        << where << ": expected dtype " << c10::toString(*expect.dtype) << ", " << expect.peer << " sent "
        << c10::toString(h.dtype) << " of shape " << shape_string(h.shape);
  }
  if (expect.shape) {
    COHORT_CHECK_AS(MismatchError, h.shape == *expect.shape)
        << where << ": expected shape " << shape_string(*expect.shape) << ", " << expect.peer << " sent shape "
        << shape_string(h.shape) << " (" << c10::toString(h.dtype) << ")";
  }
  at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(h.dtype));
  if (t.numel() > 0) comm.recv(view_of(t, where), src, tag);
  if (out) *out = h;
  return t;
}

at::Tensor broadcast_tensor(comm::Communicator& comm, const at::Tensor& tensor, int root) {
  Wire w{};
  at::Tensor t;
  if (comm.rank() == root) {
    t = tensor.detach().contiguous();
    check_tensor(t, "pipeline output");
    MessageHeader h;
    h.kind = MessageKind::output;
    h.dtype = t.scalar_type();
    h.shape.assign(t.sizes().begin(), t.sizes().end());
    w = encode(h);
  }
  comm.broadcast(wire_view(w), root);
  const MessageHeader h = decode(w, "pipeline output broadcast");
  if (comm.rank() != root) t = at::empty(h.shape, at::TensorOptions().dtype(h.dtype));
  if (t.numel() > 0) comm.broadcast(view_of(t, "pipeline output"), root);
  return t;
}

}  // namespace cohort
