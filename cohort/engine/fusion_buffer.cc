#include "cohort/engine/fusion_buffer.h"

#include <cstdlib>
#include <new>

namespace cohort::engine {
namespace {

// Ordered ops (DDP buckets: large already) run alone: a joined rank knows
// their scales only by hash, and fusion keys must be identical everywhere.
bool fusable(const ReadyOp& op, size_t threshold) {
  const OpMeta& m = op.meta;
  return !op.ordered && (m.kind == OpKind::allreduce || m.kind == OpKind::broadcast) && m.bytes() <= threshold;
}

bool same_group(const ReadyOp& a, const ReadyOp& b) {
  const OpMeta& x = a.meta;
  const OpMeta& y = b.meta;
  if (x.kind != y.kind) return false;
  if (x.kind == OpKind::broadcast) return x.root == y.root;
  if (x.dtype != y.dtype || x.op != y.op || x.prescale != y.prescale || x.postscale != y.postscale) return false;
  // avg divides by the contributors: one division for the whole group.
  return x.op != ReduceOp::avg || a.contributors == b.contributors;
}

}  // namespace

void plan_fusion(std::span<const ReadyOp> ops, size_t threshold, std::vector<FusionGroup>& out) {
  out.clear();
  std::vector<size_t> open;  // groups still accepting members
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpMeta& m = ops[i].meta;
    if (threshold == 0 || !fusable(ops[i], threshold)) {
      out.push_back(FusionGroup{{i}, m.bytes()});
      continue;
    }
    auto it = open.begin();
    for (; it != open.end(); ++it)
      if (same_group(ops[out[*it].members.front()], ops[i])) break;
    if (it != open.end() && out[*it].bytes + m.bytes() <= threshold) {
      out[*it].members.push_back(i);
      out[*it].bytes += m.bytes();
      continue;
    }
    if (it != open.end()) open.erase(it);  // full: later ops start a new group
    out.push_back(FusionGroup{{i}, m.bytes()});
    open.push_back(out.size() - 1);
  }
}

void FusionBuffer::Free::operator()(std::byte* p) const { std::free(p); }

std::byte* FusionBuffer::ensure(size_t bytes) {
  if (bytes <= capacity_) return data_.get();
  // Groups never exceed the fusion threshold; round up so that a slowly
  // growing working set reallocates rarely.
  const size_t want = (bytes + 65535) / 65536 * 65536;
  void* p = std::aligned_alloc(4096, want);
  if (!p) throw std::bad_alloc();
  data_.reset(static_cast<std::byte*>(p));
  capacity_ = want;
  return data_.get();
}

}  // namespace cohort::engine
