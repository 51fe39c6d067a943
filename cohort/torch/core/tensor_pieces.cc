#include "cohort/torch/core/tensor_pieces.h"

#include <torch/torch.h>


namespace cohort {

std::string parameter_record(const std::string& name) { return "param/" + name; }
std::string buffer_record(const std::string& name) { return "buffer/" + name; }
std::string master_record(const std::string& name) { return "master/" + name; }
std::string state_record(const std::string& name, const std::string& field) { return "state/" + name + "/" + field; }
std::string step_record(const std::string& name) { return "step/" + name; }

void write_state_piece(TensorPieceWriter& out, const std::string& name, c10::IntArrayRef shape, int64_t offset,
                       const ElementState& state) {
  int64_t elements = -1;  // the piece's, when a field says
  for (const auto& [field, values] : state.fields) {
    if (!values.defined()) continue;
    out.add(state_record(name, field), shape, offset, values);
    elements = values.numel();
  }
  // One writer of the step: the piece that holds element 0 (writers of
  // empty pieces at offset 0 leave it to that one).
  if (offset == 0 && elements != 0) out.add(step_record(name), {1}, 0, at::tensor({state.step}, at::kLong));
}

std::optional<ElementState> read_state(const TensorPieceReader& in, const std::string& name,
                                       const std::vector<std::string>& fields, const at::Tensor& parameter) {
  if (!in.contains(step_record(name))) return std::nullopt;
  at::Tensor step = at::empty({1}, at::kLong);
  in.read_into(step_record(name), 0, step);
  ElementState state{.step = step.item<int64_t>()};
  for (const std::string& field : fields) {
    at::Tensor values;
    if (in.contains(state_record(name, field))) {
      values = at::empty(parameter.sizes(), parameter.options().requires_grad(false));
      in.read_into(state_record(name, field), 0, values);
    }
    state.fields.emplace_back(field, values);
  }
  return state;
}

}  // namespace cohort
