// Named tensors cut into pieces, and the records a model's training state is
// saved as: the seam between what holds the state (a module and its
// optimizer, ZeRO's shards) and the file format that stores it
// (checkpoint/sharded_checkpoint.h), which neither side knows of.
//
// A piece is elements [offset, offset + n) of a tensor, in its flattened
// (row-major) order, together with the whole tensor's shape. A tensor may be
// cut into pieces across any number of writers; a reader assembles any range
// from whichever pieces hold it.
//
// Record names (one scheme, so any writer's checkpoint loads into any
// reader): "param/<name>" a parameter's value, "buffer/<name>" a buffer,
// "master/<name>" the float32 master copy of a half-precision parameter,
// "state/<name>/<field>" a field of its optimizer state (element_state.h),
// "step/<name>" its optimizer step count (int64, one element).
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/torch/core/element_state.h"

namespace cohort {

class TensorPieceWriter {
 public:
  virtual ~TensorPieceWriter() = default;
  // Elements [offset, offset + piece.numel()) of the tensor `name` of
  // `shape` (piece: any layout; its elements in row-major order).
  virtual void add(const std::string& name, c10::IntArrayRef shape, int64_t offset, const at::Tensor& piece) = 0;
};

class TensorPieceReader {
 public:
  virtual ~TensorPieceReader() = default;
  virtual bool contains(const std::string& name) const = 0;
  // The whole tensor's shape; ConfigError when there is no such record.
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // Whether the pieces of `name` hold elements [offset, offset + count)
  // exactly once (a check before anything is read).
  virtual bool covers(const std::string& name, int64_t offset, int64_t count) const = 0;
  // Fills `out` (contiguous) with elements [offset, offset + out.numel()) of
  // `name`, converted to out's dtype; ConfigError naming what is missing.
  virtual void read_into(const std::string& name, int64_t offset, const at::Tensor& out) const = 0;
};

std::string parameter_record(const std::string& name);
std::string buffer_record(const std::string& name);
std::string master_record(const std::string& name);
std::string state_record(const std::string& name, const std::string& field);
std::string step_record(const std::string& name);

// Elements [offset, offset + n) of parameter `name`'s optimizer state:
// `state`'s fields hold exactly those elements (any shape); the step count
// goes with the (non-empty) piece that starts at element 0.
void write_state_piece(TensorPieceWriter& out, const std::string& name, c10::IntArrayRef shape, int64_t offset,
                       const ElementState& state);

// Parameter `name`'s whole optimizer state in `in`, shaped and typed like
// `parameter`: the step count and the fields of `fields`
// (element_state_fields()) the checkpoint has, the others undefined; or
// nothing when it has no state for the parameter.
std::optional<ElementState> read_state(const TensorPieceReader& in, const std::string& name,
                                       const std::vector<std::string>& fields, const at::Tensor& parameter);

}  // namespace cohort
