// The optimizers whose state is per element (torch::optim's SGD, Adam,
// AdamW, Adagrad and RMSprop: every state tensor has its parameter's shape),
// their state as named data, read and written by parameter. What lets a
// parameter's state be cut into element ranges and joined back: ZeRO's
// shards (data_parallel/zero_optimizer.h) and sharded checkpoints
// (checkpoint/sharded_checkpoint.h).
#pragma once

#include <ATen/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cohort {

// One parameter's state: the step count (0 where the optimizer keeps none)
// and its tensors by field name, in a fixed order per type, undefined where
// unused (SGD without momentum, Adam without amsgrad).
//   SGD      momentum_buffer
//   Adam(W)  exp_avg, exp_avg_sq, max_exp_avg_sq
//   Adagrad  sum
//   RMSprop  square_avg, momentum_buffer, grad_avg
struct ElementState {
  int64_t step = 0;
  std::vector<std::pair<std::string, at::Tensor>> fields;
};

// Whether `optimizer`'s state is per element (one of the types above).
bool is_per_element(const torch::optim::Optimizer& optimizer);
// ConfigError naming the optimizer's type unless its state is per element.
void check_per_element(const torch::optim::Optimizer& optimizer);
std::string optimizer_type_name(const torch::optim::Optimizer& optimizer);
// The field names of `optimizer`'s type, in ElementState's order.
std::vector<std::string> element_state_fields(const torch::optim::Optimizer& optimizer);

// `parameter`'s state in `optimizer` (its tensors shared, not copied), or
// nothing when it has none yet.
std::optional<ElementState> element_state_of(const torch::optim::Optimizer& optimizer, const at::Tensor& parameter);
// Replaces `parameter`'s state; `state` has the fields of the optimizer's
// type, in order (an undefined tensor for an unused one).
void set_element_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter, const ElementState& state);
void erase_element_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter);

// The bytes of `optimizer`'s state tensors; ConfigError for another type.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace cohort
