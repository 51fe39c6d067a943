#include "cohort/engine/op.h"

#include <sstream>

namespace cohort::engine {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::allreduce: return "allreduce";
    case OpKind::allgather: return "allgather";
    case OpKind::broadcast: return "broadcast";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::alltoall: return "alltoall";
    case OpKind::barrier: return "barrier";
  }
  return "?";
}

bool OpMeta::agrees_with(const OpMeta& o) const {
  if (kind != o.kind || dtype != o.dtype || op != o.op || root != o.root ||
      row_elements != o.row_elements || prescale != o.prescale || postscale != o.postscale)
    return false;
  if (kind != OpKind::allgather) return count == o.count && shape == o.shape;
  // Allgather: dim 0 may differ, the trailing dimensions may not.
  if (shape.size() != o.shape.size()) return false;
  for (size_t i = 1; i < shape.size(); ++i)
    if (shape[i] != o.shape[i]) return false;
  return true;
}

std::string OpMeta::describe() const {
  std::ostringstream os;
  os << op_kind_name(kind) << '(';
  if (kind == OpKind::barrier) return os.str() + ")";
  os << count << ' ' << dtype_name(dtype);
  if (kind == OpKind::allreduce || kind == OpKind::reduce_scatter) os << ", " << reduce_op_name(op);
  if (kind == OpKind::broadcast) os << ", root " << root;
  if (kind == OpKind::allgather && row_elements != 1) os << ", rows of " << row_elements;
  if (prescale != 1.0) os << ", prescale " << prescale;
  if (postscale != 1.0) os << ", postscale " << postscale;
  if (!shape.empty()) {
    os << ", shape [";
    for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
    os << ']';
  }
  os << ')';
  return os.str();
}

}  // namespace cohort::engine
