#include "cohort/torch/core/collectives.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {
namespace {

std::string describe(std::string_view kind, const std::string& name) {
  std::ostringstream os;
  os << kind;
  if (name.empty())
    os << " (unnamed)";
  else
    os << " '" << name << "'";
  return os.str();
}

std::vector<int64_t> shape_of(const at::Tensor& t) { return t.sizes().vec(); }

// Elements per dim-0 row (1 for a 0-dim tensor).
int64_t row_elements(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

std::vector<int64_t> with_rows(const at::Tensor& t, int64_t rows) {
  std::vector<int64_t> shape = shape_of(t);
  shape[0] = rows;
  return shape;
}

void require_rows(const at::Tensor& t, const std::string& what) {
  COHORT_CHECK_AS(ConfigError, t.dim() >= 1)
      << what << ": needs a tensor with at least one dimension (rows are split or joined along dim 0)";
  COHORT_CHECK_AS(ConfigError, t.size(0) == 0 || row_elements(t) > 0)
      << what << ": rows of zero elements (shape " << t.sizes() << ") cannot be exchanged";
}

// Where an in-place op's result must end up: the caller's tensor, copied back
// from contiguous scratch when the two differ.
std::function<at::Tensor()> copy_back(const at::Tensor& original, const at::Tensor& scratch) {
  if (original.is_same(scratch)) return [original] { return original; };
  return [original, scratch] {
    torch::NoGradGuard no_grad;
    original.copy_(scratch);
    return original;
  };
}

engine::Handle submit_allgather(engine::Engine& eng, const std::string& name, const at::Tensor& in,
                                const std::string& what, std::shared_ptr<at::Tensor> out, const at::Tensor& into = {}) {
  engine::AllgatherOptions eo;
  eo.row_elements = static_cast<size_t>(std::max<int64_t>(1, row_elements(in)));
  eo.shape = shape_of(in);
  if (into.defined()) {
    COHORT_CHECK_AS(ConfigError, into.is_contiguous() && into.scalar_type() == in.scalar_type())
        << what << ": the output must be a contiguous " << in.scalar_type() << " tensor, got a "
        << (into.is_contiguous() ? "" : "non-contiguous ") << into.scalar_type() << " one";
  }
  eo.allocate = [out, into, what, shape = shape_of(in), dtype = in.scalar_type(), row = eo.row_elements](
                    size_t total, std::span<const size_t>) {
    if (into.defined()) {
      COHORT_CHECK_AS(ConfigError, size_t(into.numel()) == total)
          << what << ": the ranks gather " << total << " elements, the output holds " << into.numel();
      *out = into;
    } else {
      std::vector<int64_t> s = shape;
      s[0] = static_cast<int64_t>(total / row);
      *out = at::empty(s, at::TensorOptions().dtype(dtype));
    }
    return BufferView{out->data_ptr(), total, to_dtype(dtype, "allgather")};
  };
  const BufferView view = view_of(in, what);
  return name.empty() ? eng.submit_ordered_allgather(view, std::move(eo))
                      : eng.allgather_async(name, view, std::move(eo));
}

// The gathered tensor, or an empty one of the right shape when the engine
// had nothing to allocate.
at::Tensor gathered(const std::shared_ptr<at::Tensor>& out, const at::Tensor& like) {
  if (out->defined()) return *out;
  return at::empty(with_rows(like, 0), like.options());
}

}  // namespace

// ---- allreduce ----

namespace {
TensorHandle submit_allreduce(const at::Tensor& tensor, const AllreduceOptions& o, bool in_place) {
  engine::Engine& eng = resolve_engine(o.engine);
  const std::string what = describe("allreduce", o.name);
  check_tensor(tensor, what);
  torch::NoGradGuard no_grad;
  at::Tensor in = tensor.contiguous();
  at::Tensor out = in_place ? in : at::empty_like(in, at::MemoryFormat::Contiguous);
  engine::AllreduceOptions eo;
  eo.op = o.op;
  eo.prescale = o.prescale;
  eo.postscale = o.postscale;
  eo.shape = shape_of(tensor);
  const BufferView vin = view_of(in, what), vout = view_of(out, what);
  engine::Handle h = o.name.empty() ? eng.submit_ordered_allreduce(vin, vout, std::move(eo))
                                    : eng.allreduce_async(o.name, vin, vout, std::move(eo));
  TensorHandle::Parts parts;
  parts.name = o.name;
  parts.pending = {h};
  parts.finish = in_place ? copy_back(tensor, in) : std::function<at::Tensor()>([out] { return out; });
  parts.keep_alive = {in, out};
  return TensorHandle(std::move(parts));
}
}  // namespace

TensorHandle allreduce_async(const at::Tensor& tensor, const AllreduceOptions& options) {
  return submit_allreduce(tensor, options, false);
}
TensorHandle allreduce_async_(const at::Tensor& tensor, const AllreduceOptions& options) {
  return submit_allreduce(tensor, options, true);
}
at::Tensor allreduce(const at::Tensor& tensor, const AllreduceOptions& options) {
  return allreduce_async(tensor, options).wait();
}
at::Tensor allreduce_(const at::Tensor& tensor, const AllreduceOptions& options) {
  return allreduce_async_(tensor, options).wait();
}

// ---- allgather ----

TensorHandle allgather_async(const at::Tensor& tensor, const AllgatherOptions& o) {
  engine::Engine& eng = resolve_engine(o.engine);
  const std::string what = describe("allgather", o.name);
  check_tensor(tensor, what);
  require_rows(tensor, what);
  torch::NoGradGuard no_grad;
  at::Tensor in = tensor.contiguous();
  auto out = std::make_shared<at::Tensor>();
  TensorHandle::Parts parts;
  parts.name = o.name;
  parts.pending = {submit_allgather(eng, o.name, in, what, out, o.out)};
  parts.finish = [out, in] { return gathered(out, in); };
  parts.keep_alive = {in};
  return TensorHandle(std::move(parts));
}

at::Tensor allgather(const at::Tensor& tensor, const AllgatherOptions& options) {
  return allgather_async(tensor, options).wait();
}

// ---- broadcast ----

namespace {
TensorHandle submit_broadcast(const at::Tensor& tensor, const BroadcastOptions& o, bool in_place) {
  engine::Engine& eng = resolve_engine(o.engine);
  const std::string what = describe("broadcast", o.name);
  check_tensor(tensor, what);
  COHORT_CHECK_AS(ConfigError, o.root >= 0 && o.root < eng.size())
      << what << ": root " << o.root << " is not a rank of this group of " << eng.size();
  torch::NoGradGuard no_grad;
  at::Tensor buffer = in_place ? tensor.contiguous() : tensor.clone(at::MemoryFormat::Contiguous);
  engine::BroadcastOptions eo;
  eo.shape = shape_of(tensor);
  const BufferView view = view_of(buffer, what);
  engine::Handle h = o.name.empty() ? eng.submit_ordered_broadcast(view, o.root, std::move(eo))
                                    : eng.broadcast_async(o.name, view, o.root, std::move(eo));
  TensorHandle::Parts parts;
  parts.name = o.name;
  parts.pending = {h};
  parts.finish = in_place ? copy_back(tensor, buffer) : std::function<at::Tensor()>([buffer] { return buffer; });
  parts.keep_alive = {buffer};
  return TensorHandle(std::move(parts));
}
}  // namespace

TensorHandle broadcast_async(const at::Tensor& tensor, const BroadcastOptions& options) {
  return submit_broadcast(tensor, options, false);
}
TensorHandle broadcast_async_(const at::Tensor& tensor, const BroadcastOptions& options) {
  return submit_broadcast(tensor, options, true);
}
at::Tensor broadcast(const at::Tensor& tensor, const BroadcastOptions& options) {
  return broadcast_async(tensor, options).wait();
}
at::Tensor broadcast_(const at::Tensor& tensor, const BroadcastOptions& options) {
  return broadcast_async_(tensor, options).wait();
}

// ---- alltoall ----

namespace {

// The second stage of an uneven alltoall: `table` holds every rank's splits
// (row p = rank p's). Every block is padded to the largest, so that all ranks
// run one equal-block alltoall.
struct UnevenPlan {
  std::vector<int64_t> send_splits, recv_splits;
  int64_t block = 0;  // rows per padded block
};

UnevenPlan plan_uneven(const at::Tensor& table, int size, int rank) {
  UnevenPlan plan;
  const int64_t* s = table.data_ptr<int64_t>();
  for (int p = 0; p < size; ++p) {
    plan.send_splits.push_back(s[rank * size + p]);
    plan.recv_splits.push_back(s[p * size + rank]);
  }
  plan.block = *std::max_element(s, s + size * size);
  return plan;
}

at::Tensor pad_blocks(const at::Tensor& in, const UnevenPlan& plan) {
  at::Tensor padded = at::zeros(with_rows(in, plan.block * int64_t(plan.send_splits.size())), in.options());
  int64_t offset = 0;
  for (size_t p = 0; p < plan.send_splits.size(); ++p) {
    const int64_t n = plan.send_splits[p];
    if (n > 0) padded.narrow(0, int64_t(p) * plan.block, n).copy_(in.narrow(0, offset, n));
    offset += n;
  }
  return padded;
}

at::Tensor unpad_blocks(const at::Tensor& padded, const UnevenPlan& plan) {
  std::vector<at::Tensor> parts;
  for (size_t p = 0; p < plan.recv_splits.size(); ++p)
    parts.push_back(padded.narrow(0, int64_t(p) * plan.block, plan.recv_splits[p]));
  return at::cat(parts, 0);
}

engine::Handle submit_equal_alltoall(engine::Engine& eng, const std::string& name, const at::Tensor& in,
                                     const at::Tensor& out, const std::string& what) {
  engine::AlltoallOptions eo;
  eo.shape = shape_of(in);
  const BufferView vin = view_of(in, what), vout = view_of(out, what);
  return name.empty() ? eng.submit_ordered_alltoall(vin, vout, std::move(eo))
                      : eng.alltoall_async(name, vin, vout, std::move(eo));
}

}  // namespace

TensorHandle alltoall_async(const at::Tensor& tensor, const AlltoallOptions& o) {
  engine::Engine& eng = resolve_engine(o.engine);
  const std::string what = describe("alltoall", o.name);
  check_tensor(tensor, what);
  require_rows(tensor, what);
  const int size = eng.size(), rank = eng.rank();
  const int64_t rows = tensor.size(0);
  torch::NoGradGuard no_grad;
  at::Tensor in = tensor.contiguous();

  if (o.splits.empty()) {
    COHORT_CHECK_AS(ConfigError, rows % size == 0)
        << what << ": dim 0 (" << rows << ") does not divide by the " << size
        << " ranks; pass splits to send uneven blocks";
    at::Tensor out = at::empty_like(in, at::MemoryFormat::Contiguous);
    TensorHandle::Parts parts;
    parts.name = o.name;
    parts.pending = {submit_equal_alltoall(eng, o.name, in, out, what)};
    parts.finish = [out] { return out; };
    parts.keep_alive = {in, out};
    parts.received_splits.assign(size_t(size), rows / size);
    return TensorHandle(std::move(parts));
  }

  COHORT_CHECK_AS(ConfigError, o.splits.size() == size_t(size))
      << what << ": " << o.splits.size() << " splits given for " << size << " ranks";
  int64_t total = 0;
  for (int64_t s : o.splits) {
    COHORT_CHECK_AS(ConfigError, s >= 0) << what << ": negative split " << s;
    total += s;
  }
  COHORT_CHECK_AS(ConfigError, total == rows)
      << what << ": splits sum to " << total << " rows but the tensor has " << rows;
  at::Tensor my_splits = at::tensor(o.splits, at::TensorOptions().dtype(at::kLong));

  if (o.name.empty()) {
    // Ordered submissions must reach the engine in the caller's order, so
    // both stages are submitted from this thread: the split table first
    // (waited for here), then the data.
    auto table = std::make_shared<at::Tensor>();
    submit_allgather(eng, "", my_splits, what + " splits", table).wait();
    const UnevenPlan plan = plan_uneven(*table, size, rank);
    at::Tensor send = pad_blocks(in, plan);
    at::Tensor recv = at::empty_like(send);
    TensorHandle::Parts parts;
    parts.name = o.name;
    parts.pending = {submit_equal_alltoall(eng, "", send, recv, what)};
    parts.finish = [recv, plan] { return unpad_blocks(recv, plan); };
    parts.keep_alive = {send, recv};
    parts.received_splits = plan.recv_splits;
    return TensorHandle(std::move(parts));
  }

  // Named: the data stage is submitted by the engine thread the moment the
  // split table completes (HandleState::on_done), whatever the caller waits
  // on, and no thread outlives the engine. The caller's handle is `done`.
  struct Uneven {
    at::Tensor in, splits, send, recv;  // alive until the stage that reads them is done
    std::shared_ptr<at::Tensor> table = std::make_shared<at::Tensor>();
    UnevenPlan plan;
  };
  auto stages = std::make_shared<Uneven>();
  stages->in = in;
  stages->splits = my_splits;
  auto done = std::make_shared<engine::HandleState>(o.name);
  engine::Handle table = submit_allgather(eng, o.name + "/splits", stages->splits, what + " splits", stages->table);
  table.on_done([&eng, table, stages, done, name = o.name, what, size, rank] {
    try {
      if (std::exception_ptr error = table.error()) std::rethrow_exception(error);
      torch::NoGradGuard no_grad;
      stages->plan = plan_uneven(*stages->table, size, rank);
      stages->send = pad_blocks(stages->in, stages->plan);
      stages->recv = at::empty_like(stages->send);
      // On the engine thread (or this one, when the table was done
      // already): the engine is alive in both.
      engine::Handle data = submit_equal_alltoall(eng, name, stages->send, stages->recv, what);
      data.on_done([data, done, stages] {  // `stages` holds the buffers until the op is done
        if (std::exception_ptr error = data.error())
          done->fail(error);
        else
          done->complete();
      });
    } catch (...) {
      done->fail(std::current_exception());
    }
  });
  TensorHandle::Parts parts;
  parts.name = o.name;
  parts.pending = {engine::Handle(done)};
  parts.finish = [stages] { return unpad_blocks(stages->recv, stages->plan); };
  parts.keep_alive = {in};
  parts.received_splits_of = [stages] { return stages->plan.recv_splits; };
  return TensorHandle(std::move(parts));
}

at::Tensor alltoall(const at::Tensor& tensor, const AlltoallOptions& options) {
  return alltoall_async(tensor, options).wait();
}

// ---- reduce_scatter ----

RowBlock reduce_scatter_block(int64_t rows, int size, int rank) {
  const int64_t base = rows / size, extra = rows % size;
  RowBlock b;
  b.rows = base + (rank < extra ? 1 : 0);
  b.offset = rank * base + std::min<int64_t>(rank, extra);
  return b;
}

TensorHandle reduce_scatter_async(const at::Tensor& tensor, const ReduceScatterOptions& o) {
  engine::Engine& eng = resolve_engine(o.engine);
  const std::string what = describe("reduce_scatter", o.name);
  check_tensor(tensor, what);
  require_rows(tensor, what);
  const int size = eng.size(), rank = eng.rank();
  const int64_t rows = tensor.size(0);
  const int64_t block = (rows + size - 1) / size;
  torch::NoGradGuard no_grad;
  at::Tensor in;
  if (rows % size == 0) {
    in = tensor.contiguous();
  } else {
    // Pad each rank's block to `block` rows; the padding is reduced with the
    // rest and dropped, so its value does not matter for any op.
    in = at::zeros(with_rows(tensor, block * size), tensor.options());
    for (int r = 0; r < size; ++r) {
      const RowBlock b = reduce_scatter_block(rows, size, r);
      if (b.rows > 0) in.narrow(0, r * block, b.rows).copy_(tensor.narrow(0, b.offset, b.rows));
    }
  }
  at::Tensor out = at::empty(with_rows(tensor, block), tensor.options().memory_format(at::MemoryFormat::Contiguous));
  engine::ReduceScatterOptions eo;
  eo.op = o.op;
  eo.prescale = o.prescale;
  eo.postscale = o.postscale;
  eo.shape = shape_of(in);
  const BufferView vin = view_of(in, what), vout = view_of(out, what);
  engine::Handle h = o.name.empty() ? eng.submit_ordered_reduce_scatter(vin, vout, std::move(eo))
                                    : eng.reduce_scatter_async(o.name, vin, vout, std::move(eo));
  const int64_t mine = reduce_scatter_block(rows, size, rank).rows;
  TensorHandle::Parts parts;
  parts.name = o.name;
  parts.pending = {h};
  parts.finish = [out, mine] { return out.narrow(0, 0, mine); };
  parts.keep_alive = {in, out};
  return TensorHandle(std::move(parts));
}

at::Tensor reduce_scatter(const at::Tensor& tensor, const ReduceScatterOptions& options) {
  return reduce_scatter_async(tensor, options).wait();
}

// ---- barrier, join ----

void barrier(const BarrierOptions& options) { resolve_engine(options.engine).barrier_async(options.name).wait(); }

int join(engine::Engine* engine) { return resolve_engine(engine).join(); }

}  // namespace cohort
