#include "cohort/engine/executor.h"

#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/reduce.h"
#include "cohort/engine/kernels.h"

namespace cohort::engine {

Executor::Executor(comm::Communicator& comm, size_t threshold)
    : comm_(comm), threshold_(threshold), rank_(comm.rank()), size_(comm.size()) {}

BufferView Executor::scratch(int which, size_t count, DType dtype) {
  auto& s = scratch_[which];
  const size_t bytes = count * dtype_size(dtype);
  if (s.size() < bytes + 1) s.resize(bytes + 1);
  return {s.data(), count, dtype};
}

ReduceOp Executor::comm_op(const ReadyOp& op, bool& finish_avg) const {
  finish_avg = op.meta.op == ReduceOp::avg && op.contributors != size_;
  return finish_avg ? ReduceOp::sum : op.meta.op;
}

std::exception_ptr Executor::root_missing(const ReadyOp& op) const {
  return std::make_exception_ptr(Error("broadcast '" + op.name + "': root rank " + std::to_string(op.meta.root) +
                                       " is inside join() and did not submit it; a joined rank cannot be a "
                                       "broadcast root"));
}

void Executor::run(std::span<Work> work, const std::function<void(std::span<Work* const>)>& done) {
  if (work.empty()) return;
  // work[i].op == &ready[i] for one contiguous ready list (the contract).
  plan_fusion({work.front().op, work.size()}, threshold_, groups_);
  for (const FusionGroup& g : groups_) {
    members_.clear();
    const auto start = Clock::now();
    for (size_t i : g.members) {
      members_.push_back(&work[i]);
      work[i].start = start;
      work[i].fused = g.fused();
    }
    Work& first = *members_.front();
    const OpKind kind = first.op->meta.kind;
    if (g.fused()) {
      if (kind == OpKind::allreduce)
        run_fused_allreduce(members_);
      else
        run_fused_broadcast(members_);
      counters_.fused_ops += members_.size();
      ++counters_.fusion_groups;
    } else {
      switch (kind) {
        case OpKind::allreduce: run_allreduce(first); break;
        case OpKind::broadcast: run_broadcast(first); break;
        case OpKind::allgather: run_allgather(first); break;
        case OpKind::reduce_scatter: run_reduce_scatter(first); break;
        case OpKind::alltoall: run_alltoall(first); break;
        case OpKind::barrier:
          first.copied_in = Clock::now();
          comm_.barrier();
          first.reduced = Clock::now();
          break;
      }
    }
    const auto end = Clock::now();
    for (Work* w : members_) {
      w->end = end;
      if (w->local) counters_.bytes += w->local->in.bytes();
    }
    done(members_);
  }
}

void Executor::run_allreduce(Work& w) {
  const ReadyOp& op = *w.op;
  const OpMeta& m = op.meta;
  bool finish = false;
  const ReduceOp cop = comm_op(op, finish);
  w.copied_in = Clock::now();
  if (!w.local) {
    BufferView id = scratch(0, m.count, m.dtype);
    fill_identity(id, m.op);
    comm_.allreduce(id, id, {cop});
    w.reduced = Clock::now();
    return;
  }
  const BufferView in = w.local->in;
  const BufferView out = w.local->out;
  if (m.prescale != 1.0) {
    scale_copy(m.dtype, out.data, in.data, m.count, m.prescale);
    w.copied_in = Clock::now();
    comm_.allreduce(out, out, {cop});
  } else {
    comm_.allreduce(in, out, {cop});
  }
  w.reduced = Clock::now();
  if (finish) finish_average(m.dtype, out.data, m.count, op.contributors);
  if (m.postscale != 1.0) scale_copy(m.dtype, out.data, out.data, m.count, m.postscale);
}

void Executor::run_fused_allreduce(std::span<Work* const> group) {
  const ReadyOp& op0 = *group.front()->op;
  const DType dtype = op0.meta.dtype;
  const size_t es = dtype_size(dtype);
  bool finish = false;
  const ReduceOp cop = comm_op(op0, finish);
  size_t total = 0;
  for (Work* w : group) total += w->op->meta.count;
  std::byte* buf = fusion_.ensure(total * es + 1);
  size_t off = 0;
  for (Work* w : group) {
    const OpMeta& m = w->op->meta;
    std::byte* dst = buf + off * es;
    if (!w->local)
      fill_identity({dst, m.count, dtype}, m.op);
    else if (m.prescale != 1.0)
      scale_copy(dtype, dst, w->local->in.data, m.count, m.prescale);
    else if (m.count)
      std::memcpy(dst, w->local->in.data, m.count * es);
    off += m.count;
  }
  const auto copied = Clock::now();
  comm_.allreduce(BufferView{buf, total, dtype}, BufferView{buf, total, dtype}, {cop});
  const auto reduced = Clock::now();
  if (finish) finish_average(dtype, buf, total, op0.contributors);
  off = 0;
  for (Work* w : group) {
    const OpMeta& m = w->op->meta;
    w->copied_in = copied;
    w->reduced = reduced;
    const std::byte* src = buf + off * es;
    off += m.count;
    if (!w->local) continue;
    if (m.postscale != 1.0)
      scale_copy(dtype, w->local->out.data, src, m.count, m.postscale);
    else if (m.count)
      std::memcpy(w->local->out.data, src, m.count * es);
  }
}

void Executor::run_broadcast(Work& w) {
  const ReadyOp& op = *w.op;
  if (!op.held_by(op.meta.root)) {
    w.error = root_missing(op);
    return;
  }
  w.copied_in = Clock::now();
  const BufferView view = w.local ? w.local->in : scratch(0, op.meta.count, op.meta.dtype);
  comm_.broadcast(view, op.meta.root);
  w.reduced = Clock::now();
}

void Executor::run_fused_broadcast(std::span<Work* const> group) {
  const int root = group.front()->op->meta.root;
  size_t total = 0;
  for (Work* w : group) {
    if (!w->op->held_by(root))
      w->error = root_missing(*w->op);  // every rank knows: all skip it
    else
      total += w->op->meta.bytes();
  }
  std::byte* buf = fusion_.ensure(total + 1);
  if (rank_ == root) {
    size_t off = 0;
    for (Work* w : group) {
      if (w->error) continue;
      const size_t n = w->op->meta.bytes();
      if (n) std::memcpy(buf + off, w->local->in.data, n);
      off += n;
    }
  }
  const auto copied = Clock::now();
  comm_.broadcast(BufferView{buf, total, DType::u8}, root);
  const auto reduced = Clock::now();
  size_t off = 0;
  for (Work* w : group) {
    w->copied_in = copied;
    w->reduced = reduced;
    if (w->error) continue;
    const size_t n = w->op->meta.bytes();
    if (rank_ != root && w->local && n) std::memcpy(w->local->in.data, buf + off, n);
    off += n;
  }
}

void Executor::run_allgather(Work& w) {
  const OpMeta& m = w.op->meta;
  const size_t es = dtype_size(m.dtype);
  int64_t mine = w.local ? static_cast<int64_t>(w.local->meta.count) : 0;
  counts_.resize(size_t(size_));
  comm_.allgather(BufferView{&mine, 1, DType::i64}, BufferView{counts_.data(), counts_.size(), DType::i64});
  std::vector<size_t> counts(counts_.begin(), counts_.end());
  size_t total = 0;
  for (size_t c : counts) total += c;
  BufferView out{};
  if (w.local) {
    try {
      HandleState& st = *w.local->state;
      if (w.local->allocate) {
        out = w.local->allocate(total, counts);
        COHORT_CHECK(out.count == total && out.dtype == m.dtype && (out.data || total == 0))
            << "allgather '" << w.local->name << "': the allocator returned " << out.count << " "
            << dtype_name(out.dtype) << " for " << total << " " << dtype_name(m.dtype);
      } else {
        st.owned_output.resize(total * es + 1);
        out = BufferView{st.owned_output.data(), total, m.dtype};
      }
    } catch (...) {
      w.error = std::current_exception();
    }
  }
  if (!w.local || w.error) out = scratch(1, total, m.dtype);
  const BufferView in = w.local ? w.local->in : BufferView{scratch(0, 0, m.dtype).data, 0, m.dtype};
  w.copied_in = Clock::now();
  comm_.allgatherv(in, out, counts);
  w.reduced = Clock::now();
  if (w.local && !w.error) {
    w.local->state->output = out;
    w.local->state->counts = std::move(counts);
  }
}

void Executor::run_reduce_scatter(Work& w) {
  const ReadyOp& op = *w.op;
  const OpMeta& m = op.meta;
  const size_t block = m.count / size_t(size_);
  bool finish = false;
  const ReduceOp cop = comm_op(op, finish);
  BufferView in, out;
  if (w.local) {
    in = w.local->in;
    out = w.local->out;
    if (m.prescale != 1.0) {
      BufferView tmp = scratch(0, m.count, m.dtype);
      scale_copy(m.dtype, tmp.data, in.data, m.count, m.prescale);
      in = tmp;
    }
  } else {
    in = scratch(0, m.count, m.dtype);
    fill_identity(in, m.op);
    out = scratch(1, block, m.dtype);
  }
  w.copied_in = Clock::now();
  comm_.reduce_scatter(in, out, {cop});
  w.reduced = Clock::now();
  if (!w.local) return;
  if (finish) finish_average(m.dtype, out.data, block, op.contributors);
  if (m.postscale != 1.0) scale_copy(m.dtype, out.data, out.data, block, m.postscale);
}

void Executor::run_alltoall(Work& w) {
  const OpMeta& m = w.op->meta;
  BufferView in, out;
  if (w.local) {
    in = w.local->in;
    out = w.local->out;
  } else {
    in = scratch(0, m.count, m.dtype);
    std::memset(in.data, 0, in.bytes());
    out = scratch(1, m.count, m.dtype);
  }
  w.copied_in = Clock::now();
  comm_.alltoall(in, out);
  w.reduced = Clock::now();
}

}  // namespace cohort::engine
