#include "cohort/torch/core/element_state.h"

#include <c10/util/typeid.h>
#include <torch/optim.h>

#include <memory>
#include <sstream>
#include <type_traits>
#include <typeinfo>

#include "cohort/common/check.h"

namespace cohort {
namespace {

namespace optim = torch::optim;

enum class Kind { sgd, adam, adamw, adagrad, rmsprop, other };

Kind kind_of(const optim::Optimizer& o) {
  if (dynamic_cast<const optim::SGD*>(&o)) return Kind::sgd;
  if (dynamic_cast<const optim::Adam*>(&o)) return Kind::adam;
  if (dynamic_cast<const optim::AdamW*>(&o)) return Kind::adamw;
  if (dynamic_cast<const optim::Adagrad*>(&o)) return Kind::adagrad;
  if (dynamic_cast<const optim::RMSprop*>(&o)) return Kind::rmsprop;
  return Kind::other;
}

// The optimizer's state key of parameter `p`: the TensorImpl's address, as a
// string in LibTorch 1.x (c10::guts::to_string of the pointer) and the
// pointer itself where the map is keyed by it.
template <typename Map>
typename Map::key_type state_key(const Map&, const at::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.numel() * t.element_size()) : 0; }

}  // namespace

std::string optimizer_type_name(const optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

bool is_per_element(const optim::Optimizer& optimizer) { return kind_of(optimizer) != Kind::other; }

void check_per_element(const optim::Optimizer& optimizer) {
  COHORT_CHECK_AS(ConfigError, is_per_element(optimizer))
      << "the optimizer " << optimizer_type_name(optimizer)
      << " is not one whose state is per element (SGD, Adam, AdamW, Adagrad, RMSprop), so its state cannot be "
         "split into element ranges";
}

std::vector<std::string> element_state_fields(const optim::Optimizer& optimizer) {
  check_per_element(optimizer);
  switch (kind_of(optimizer)) {
    case Kind::sgd: return {"momentum_buffer"};
    case Kind::adam:
    case Kind::adamw: return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    case Kind::adagrad: return {"sum"};
    default: return {"square_avg", "momentum_buffer", "grad_avg"};
  }
}

std::optional<ElementState> element_state_of(const optim::Optimizer& optimizer, const at::Tensor& parameter) {
  const auto& map = optimizer.state();
  const auto it = map.find(state_key(map, parameter));
  if (it == map.end()) return std::nullopt;
  const optim::OptimizerParamState* state = it->second.get();
  const std::vector<std::string> names = element_state_fields(optimizer);
  std::vector<at::Tensor> t;
  int64_t step = 0;
  if (const auto* s = dynamic_cast<const optim::SGDParamState*>(state)) {
    t = {s->momentum_buffer()};
  } else if (const auto* s = dynamic_cast<const optim::AdamParamState*>(state)) {
    step = s->step(), t = {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
  } else if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(state)) {
    step = s->step(), t = {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()};
  } else if (const auto* s = dynamic_cast<const optim::AdagradParamState*>(state)) {
    step = s->step(), t = {s->sum()};
  } else if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(state)) {
    step = s->step(), t = {s->square_avg(), s->momentum_buffer(), s->grad_avg()};
  } else {
    COHORT_THROW(ConfigError) << "optimizer state of an unknown type in " << optimizer_type_name(optimizer);
  }
  ElementState result{.step = step};
  for (size_t i = 0; i < t.size(); ++i) result.fields.emplace_back(names.at(i), t[i]);
  return result;
}

void set_element_state(optim::Optimizer& optimizer, const at::Tensor& parameter, const ElementState& state) {
  const std::vector<std::string> names = element_state_fields(optimizer);
  COHORT_CHECK_EQ(state.fields.size(), names.size()) << "state fields of " << optimizer_type_name(optimizer);
  auto t = [&](size_t i) { return state.fields.at(i).second; };
  std::unique_ptr<optim::OptimizerParamState> made;
  switch (kind_of(optimizer)) {
    case Kind::sgd: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(t(0));
      made = std::move(s);
      break;
    }
    case Kind::adam: {
      auto s = std::make_unique<optim::AdamParamState>();
      s->step(state.step), s->exp_avg(t(0)), s->exp_avg_sq(t(1)), s->max_exp_avg_sq(t(2));
      made = std::move(s);
      break;
    }
    case Kind::adamw: {
      auto s = std::make_unique<optim::AdamWParamState>();
      s->step(state.step), s->exp_avg(t(0)), s->exp_avg_sq(t(1)), s->max_exp_avg_sq(t(2));
      made = std::move(s);
      break;
    }
    case Kind::adagrad: {
      auto s = std::make_unique<optim::AdagradParamState>();
      s->step(state.step), s->sum(t(0));
      made = std::move(s);
      break;
    }
    default: {
      auto s = std::make_unique<optim::RMSpropParamState>();
      s->step(state.step), s->square_avg(t(0)), s->momentum_buffer(t(1)), s->grad_avg(t(2));
      made = std::move(s);
    }
  }
  auto& map = optimizer.state();
  map[state_key(map, parameter)] = std::move(made);
}

void erase_element_state(optim::Optimizer& optimizer, const at::Tensor& parameter) {
  auto& map = optimizer.state();
  map.erase(state_key(map, parameter));
}

int64_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  check_per_element(optimizer);
  int64_t bytes = 0;
  for (const auto& group : optimizer.param_groups())
    for (const at::Tensor& p : group.params())
      if (const auto state = element_state_of(optimizer, p))
        for (const auto& field : state->fields) bytes += bytes_of(field.second);
  return bytes;
}

}  // namespace cohort
