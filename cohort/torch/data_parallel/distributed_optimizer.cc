#include "cohort/torch/data_parallel/distributed_optimizer.h"

#include <torch/torch.h>

#include <exception>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_view.h"
#include "cohort/torch/core/zero_grad.h"
#include "cohort/torch/data_parallel/accumulated_grad_hooks.h"

namespace cohort {

struct DistributedOptimizer::Impl {
  struct Entry {
    std::string name;     // the parameter's
    std::string op_name;  // the engine op's
    at::Tensor param;
    int passes = 0;        // backward passes since the last synchronize
    bool submitted = false;
    at::Tensor wire;       // reduced in place by the engine until handle completes
    engine::Handle handle;
  };

  engine::Engine* engine = nullptr;
  DistributedOptimizerOptions options;
  engine::AllreduceOptions reduce;  // op and scales, the same for every entry
  std::mutex mutex;
  std::vector<Entry> entries;
  std::unique_ptr<AccumulatedGradHooks> hooks;
  bool synchronized = false;

  // Called with the mutex held. Without compression the wire is the gradient
  // itself (contiguous), reduced in place: no buffer to allocate and fault in,
  // no copy back.
  void submit(Entry& e, const at::Tensor& gradient) {
    COHORT_CHECK_AS(ConfigError, gradient.layout() == c10::kStrided)
        << "DistributedOptimizer: parameter '" << e.name << "' has a sparse gradient, which is not supported";
    e.wire = compress(gradient, options.compression);
    engine::AllreduceOptions o = reduce;
    o.shape = e.param.sizes().vec();
    const BufferView v = view_of(e.wire, "DistributedOptimizer gradient of '" + e.name + "'");
    e.handle = engine->allreduce_async(e.op_name, v, v, std::move(o));
    e.submitted = true;
  }

  // After autograd accumulated this pass's gradient into .grad().
  void on_accumulated(size_t index) {
    std::lock_guard lock(mutex);
    Entry& e = entries[index];
    // Autograd runs the node for an undefined gradient too; that is no
    // gradient (step() submits the parameter then).
    if (!e.param.grad().defined()) return;
    synchronized = false;
    ++e.passes;
    COHORT_CHECK_AS(ConfigError, e.passes <= options.backward_passes_per_step)
        << "DistributedOptimizer: the gradient of '" << e.name << "' was computed " << e.passes
        << " times since the last step(), more than backward_passes_per_step = " << options.backward_passes_per_step
        << "; call step() (or synchronize()) after every " << options.backward_passes_per_step << " backward passes";
    if (e.passes < options.backward_passes_per_step) return;
    torch::NoGradGuard no_grad;
    submit(e, e.param.grad());
  }

  // Waits for every submitted op, even after a failure, so that no op is
  // left writing into buffers that are about to be released.
  std::exception_ptr wait_all() {
    std::exception_ptr first;
    for (Entry& e : entries) {
      if (!e.submitted) continue;
      try {
        e.handle.wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    return first;
  }
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           const torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)), impl_(std::make_shared<Impl>()) {
  COHORT_CHECK_AS(ConfigError, options_.op == ReduceOp::avg || options_.op == ReduceOp::sum)
      << "DistributedOptimizer: op must be avg or sum, got " << reduce_op_name(options_.op);
  COHORT_CHECK_AS(ConfigError, options_.backward_passes_per_step >= 1)
      << "DistributedOptimizer: backward_passes_per_step must be at least 1, got "
      << options_.backward_passes_per_step;
  COHORT_CHECK_AS(ConfigError, options_.gradient_predivide_factor > 0)
      << "DistributedOptimizer: gradient_predivide_factor must be positive, got "
      << options_.gradient_predivide_factor;
  COHORT_CHECK_AS(ConfigError, options_.op == ReduceOp::avg || options_.gradient_predivide_factor == 1.0)
      << "DistributedOptimizer: gradient_predivide_factor applies to op avg only";
  Impl& impl = *impl_;
  impl.engine = &resolve_engine(options_.engine);
  impl.options = options_;
  const double passes = options_.average_backward_passes ? options_.backward_passes_per_step : 1;
  impl.reduce.op = options_.op;
  impl.reduce.prescale = 1.0 / (options_.gradient_predivide_factor * passes);
  impl.reduce.postscale = options_.gradient_predivide_factor;

  std::unordered_map<const void*, std::string> names;
  std::unordered_set<std::string> seen;
  for (const auto& item : named_parameters) {
    COHORT_CHECK_AS(ConfigError, seen.insert(item.key()).second)
        << "DistributedOptimizer: parameter name '" << item.key() << "' appears twice";
    names.emplace(item.value().unsafeGetTensorImpl(), item.key());  // a shared tensor keeps its first name
  }
  std::unordered_set<const void*> added;
  size_t group_index = 0;
  for (const auto& group : optimizer.param_groups()) {
    size_t param_index = 0;
    for (const at::Tensor& p : group.params()) {
      auto it = names.find(p.unsafeGetTensorImpl());
      COHORT_CHECK_AS(ConfigError, it != names.end())
          << "DistributedOptimizer: parameter " << param_index << " of param group " << group_index << " (shape "
          << p.sizes() << ") is not among the named parameters; pass module->named_parameters() of the module "
                          "the optimizer trains";
      ++param_index;
      if (!p.requires_grad() || !added.insert(p.unsafeGetTensorImpl()).second) continue;
      check_tensor(p, "DistributedOptimizer parameter '" + it->second + "'");
      Impl::Entry e;
      e.name = it->second;
      e.op_name = options_.name_prefix + "/" + e.name;
      e.param = p;
      impl.entries.push_back(std::move(e));
    }
    ++group_index;
  }
  std::vector<at::Tensor> params;
  for (const auto& e : impl.entries) params.push_back(e.param);
  std::weak_ptr<Impl> weak = impl_;
  impl.hooks = std::make_unique<AccumulatedGradHooks>(params, [weak](size_t i) {
    if (auto self = weak.lock()) self->on_accumulated(i);
  });
}

DistributedOptimizer::~DistributedOptimizer() {
  std::lock_guard lock(impl_->mutex);
  (void)impl_->wait_all();
  impl_->hooks->remove();
}

void DistributedOptimizer::synchronize() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mutex);
  torch::NoGradGuard no_grad;
  std::exception_ptr error;
  try {
    for (auto& e : impl.entries) {
      if (e.submitted) continue;
      const at::Tensor& g = e.param.grad();
      impl.submit(e, g.defined() ? g : at::zeros_like(e.param));
    }
  } catch (...) {
    error = std::current_exception();
  }
  std::exception_ptr wait_error = impl.wait_all();
  if (!error) error = wait_error;
  for (auto& e : impl.entries) {
    // Reduced in place unless the wire is a compressed or contiguous copy
    // (or the zeros of a parameter that got no gradient).
    if (e.submitted && !error && !e.wire.is_same(e.param.grad()))
      e.param.mutable_grad() = decompress(e.wire, e.param.scalar_type());
    e.submitted = false;
    e.passes = 0;
    e.wire = at::Tensor();
    e.handle = engine::Handle();
  }
  if (error) std::rethrow_exception(error);
  impl.synchronized = true;
}

void DistributedOptimizer::step() {
  bool synchronized;
  {
    std::lock_guard lock(impl_->mutex);
    synchronized = impl_->synchronized;
  }
  if (!synchronized) synchronize();
  optimizer_.step();
  std::lock_guard lock(impl_->mutex);
  impl_->synchronized = false;
}

void DistributedOptimizer::zero_grad() { zero_grad_to_none(optimizer_); }

size_t DistributedOptimizer::num_reduced_parameters() const { return impl_->entries.size(); }

}  // namespace cohort
