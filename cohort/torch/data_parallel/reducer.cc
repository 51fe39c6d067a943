#include "cohort/torch/data_parallel/reducer.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "cohort/common/check.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_view.h"
#include "cohort/torch/data_parallel/accumulated_grad_hooks.h"
#include "cohort/torch/data_parallel/replica_agreement.h"

namespace cohort {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params,
                                                const std::vector<size_t>& order, int64_t first_cap, int64_t cap) {
  struct Open {
    size_t created = 0;
    int64_t bytes = 0;
    std::vector<size_t> members;
  };
  std::vector<std::pair<size_t, std::vector<size_t>>> done;  // (creation index, members)
  std::map<c10::ScalarType, Open> open;
  size_t created = 0;
  for (size_t i : order) {
    const at::Tensor& p = params.at(i);
    auto it = open.find(p.scalar_type());
    // A parameter that fills a bucket by itself gets one of its own: it is
    // then reduced in place in its .grad(), without a copy into a shared
    // buffer, and the smaller ones gathered so far need not wait for it.
    if (it != open.end() && int64_t(p.nbytes()) >= cap && !it->second.members.empty()) {
      done.emplace_back(it->second.created, std::move(it->second.members));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) it = open.emplace(p.scalar_type(), Open{created++, 0, {}}).first;
    Open& b = it->second;
    b.members.push_back(i);
    b.bytes += int64_t(p.nbytes());
    if (b.bytes >= (b.created == 0 ? first_cap : cap)) {
      done.emplace_back(b.created, std::move(b.members));
      open.erase(it);
    }
  }
  for (auto& [type, b] : open) done.emplace_back(b.created, std::move(b.members));
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<size_t>> out;
  for (auto& d : done) out.push_back(std::move(d.second));
  return out;
}

struct Reducer::Impl : std::enable_shared_from_this<Reducer::Impl> {
  struct Bucket {
    std::vector<size_t> params;
    at::Tensor buffer;
    std::vector<at::Tensor> views;  // per member, shaped like the parameter
    size_t pending = 0;
    GradBucket grad_bucket;
    // This iteration, a one-parameter bucket reduces the parameter's .grad()
    // itself (grad_bucket points at it) instead of buffer.
    bool grad_in_place = false;
  };
  struct Location {
    size_t bucket = 0, position = 0;
  };

  EngineRef engine;
  ReducerOptions options;
  std::shared_ptr<CommHook> hook;
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  std::unique_ptr<AccumulatedGradHooks> ready_hooks;

  std::mutex mutex;
  std::vector<Bucket> buckets;
  std::vector<Location> locations;
  std::vector<char> ready;
  // find_unused_parameters: 1 where autograd produced a gradient this
  // iteration; summed over ranks at the end of backward.
  at::Tensor used;
  size_t ready_count = 0;
  size_t next_launch = 0;
  bool in_backward = false;
  bool require_sync = true;
  bool rebuilt = false;
  std::vector<size_t> arrival;
  int64_t iterations = 0;
  // The order buckets are filled in (reverse registration, then rank 0's
  // arrival order) and the cap; while autotuning, the iteration the last
  // step mark was at.
  std::vector<size_t> order;
  int64_t cap = 0;
  bool tuning = false;
  int64_t tuned_at = 0;

  std::vector<std::vector<size_t>> assignment() const {
    // A cap the tuner chose bounds the first bucket too (the configured
    // ones are PyTorch's: the first bucket's cap whatever the others').
    const int64_t first =
        cap == options.bucket_bytes ? options.first_bucket_bytes : std::min(options.first_bucket_bytes, cap);
    return assign_buckets(params, order, first, cap);
  }

  void build(const std::vector<std::vector<size_t>>& assignment) {
    std::vector<Bucket> next;
    locations.assign(params.size(), {});
    for (size_t b = 0; b < assignment.size(); ++b) {
      Bucket bucket;
      bucket.params = assignment[b];
      int64_t total = 0;
      for (size_t i : bucket.params) total += params[i].numel();
      bucket.buffer = at::zeros({total}, at::TensorOptions().dtype(params[bucket.params[0]].scalar_type()));
      int64_t offset = 0;
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const at::Tensor& p = params[bucket.params[k]];
        // Aliases of the bucket's storage, not autograd views: optimizers'
        // zero_grad() calls detach_() on .grad(), which views refuse.
        bucket.views.push_back(at::empty({0}, bucket.buffer.options())
                                   .set_(bucket.buffer.storage(), offset, p.sizes(), p.strides()));
        offset += p.numel();
        locations[bucket.params[k]] = {b, k};
        bucket.grad_bucket.names.push_back(names[bucket.params[k]]);
      }
      bucket.pending = bucket.params.size();
      bucket.grad_bucket.index = b;
      bucket.grad_bucket.buffer = bucket.buffer;
      bucket.grad_bucket.gradients = bucket.views;
      bucket.grad_bucket.last = b + 1 == assignment.size();
      next.push_back(std::move(bucket));
    }
    if (options.gradient_as_bucket_view) {
      // Existing gradients move into the new buckets, which become .grad().
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor& g = params[i].grad();
        if (!g.defined()) continue;
        at::Tensor& view = next[locations[i].bucket].views[locations[i].position];
        view.copy_(g);
        params[i].mutable_grad() = view;
      }
    }
    buckets = std::move(next);
  }

  // Called with the mutex held, on autograd's thread (or in forward for
  // parameters find_unused_parameters found unused).
  void mark_ready(size_t i) {
    COHORT_CHECK_AS(ConfigError, !ready[i])
        << "DistributedDataParallel: parameter " << names[i] << " was marked ready twice in one backward pass on rank "
        << engine.rank() << " (a module used twice through reentrant backward, or several backward passes per "
        << "forward, is not supported; use no_sync() to accumulate)";
    ready[i] = 1;
    ++ready_count;
    torch::NoGradGuard no_grad;
    Bucket& b = buckets[locations[i].bucket];
    at::Tensor& view = b.views[locations[i].position];
    const at::Tensor& g = params[i].grad();
    // Used: it has a gradient here, from this pass or accumulated under
    // no_sync; only a parameter without one on every rank stays undefined.
    if (used.defined() && g.defined()) used.data_ptr<int32_t>()[i] = 1;
    // The 1/size of the average, unless the hook divides (averages_over_ranks):
    // folded into the copy when there is one, else one pass over the view.
    const double inv = hook->averages_over_ranks() ? 1.0 : 1.0 / engine.size();
    if (b.params.size() == 1 && g.defined() && g.data_ptr() != view.data_ptr() && g.is_contiguous() &&
        g.scalar_type() == view.scalar_type()) {
      // A gradient autograd allocated (zero_grad(set_to_none), first use) or
      // kept from an earlier in-place iteration: reduce it where it is.
      if (inv != 1.0) g.mul_(inv);
      b.grad_in_place = true;
      if (options.gradient_as_bucket_view) {
        // .grad() may alias the bucket: it becomes the bucket's storage, so
        // the largest parameters do not keep a second buffer of their size.
        b.buffer = g.view({-1});
        b.views[0] = g;
      }
      b.grad_bucket.buffer = g.view({-1});
      b.grad_bucket.gradients = {g};
    } else if (options.gradient_as_bucket_view) {
      // Autograd accumulated straight into the bucket unless .grad() was
      // replaced (zero_grad(set_to_none), first use): then copy once and
      // make .grad() the view again.
      if (g.defined() && g.data_ptr() == view.data_ptr()) {
        if (inv != 1.0) view.mul_(inv);
      } else if (g.defined()) {
        at::mul_out(view, g, at::scalar_tensor(inv, g.options()));
        params[i].mutable_grad() = view;
      } else {
        view.zero_();  // .grad() stays undefined unless another rank used it (finalize)
      }
    } else if (g.defined()) {
      if (inv != 1.0)
        at::mul_out(view, g, at::scalar_tensor(inv, g.options()));
      else
        view.copy_(g);
    } else {
      view.zero_();
    }
    if (--b.pending == 0) launch_ready();
  }

  void launch_ready() {
    // Index order on every rank: the hooks' ordered submissions line up.
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      hook->launch(buckets[next_launch].grad_bucket, *engine.lock());
      ++next_launch;
    }
  }

  void on_ready(size_t i) {
    std::lock_guard lock(mutex);
    if (!require_sync) return;  // no_sync: autograd accumulates in .grad()
    if (!in_backward) {
      in_backward = true;
      std::weak_ptr<Impl> weak = weak_from_this();
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto self = weak.lock()) self->finalize();
      });
    }
    if (!rebuilt) arrival.push_back(i);
    mark_ready(i);
  }

  // End of backward: every bucket launched means every gradient arrived.
  void finalize() {
    std::lock_guard lock(mutex);
    in_backward = false;
    if (next_launch < buckets.size()) return;  // prepare_for_forward() reports the missing ones
    std::exception_ptr error;
    std::shared_ptr<engine::Engine> eng;
    try {
      eng = engine.lock();
    } catch (...) {
      error = std::current_exception();
    }
    for (Bucket& b : buckets) {
      if (!eng) break;
      try {
        hook->finish(b.grad_bucket, *eng);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    // As PyTorch: a parameter no rank used keeps its .grad() as it was
    // (undefined stays undefined, so optimizers skip it), one small ordered
    // allreduce after the buckets. Submitted even after a hook failed here,
    // so that this rank's ordered submissions stay in step with its peers'.
    at::Tensor used_anywhere;
    if (used.defined() && eng) {
      used_anywhere = used.clone();
      try {
        const BufferView v = view_of(used_anywhere, "DistributedDataParallel used-parameter map");
        eng->submit_ordered_allreduce(v, v, {.op = ReduceOp::sum}).wait();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) {
      reset_iteration();
      std::rethrow_exception(step_count_error(error, "DistributedDataParallel", engine.rank(), iterations + 1));
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (buckets[locations[i].bucket].grad_in_place) continue;  // .grad() holds the result
      if (used_anywhere.defined() && used_anywhere.data_ptr<int32_t>()[i] == 0 && !params[i].grad().defined())
        continue;
      const at::Tensor& view = buckets[locations[i].bucket].views[locations[i].position];
      at::Tensor& g = params[i].mutable_grad();
      if (options.gradient_as_bucket_view) {
        if (!(g.defined() && g.data_ptr() == view.data_ptr())) g = view;
      } else if (g.defined()) {
        g.copy_(view);
      } else {
        g = view.clone();
      }
    }
    reset_iteration();
    ++iterations;
  }

  void reset_iteration() {
    std::fill(ready.begin(), ready.end(), 0);
    if (used.defined()) used.zero_();
    ready_count = 0;
    next_launch = 0;
    for (Bucket& b : buckets) {
      b.pending = b.params.size();
      b.grad_in_place = false;
      b.grad_bucket.buffer = b.buffer;
      b.grad_bucket.gradients = b.views;
    }
  }

  void rebuild() {
    const size_t n = params.size();
    std::vector<int64_t> arrived;
    std::vector<char> seen(n, 0);
    for (size_t i : arrival)
      if (!seen[i]) seen[i] = 1, arrived.push_back(int64_t(i));
    for (size_t k = n; k-- > 0;)
      if (!seen[k]) arrived.push_back(int64_t(k));
    at::Tensor t = at::tensor(arrived, at::kLong);
    // Rank 0's order for everyone: ranks may see gradients in different orders.
    engine.lock()->submit_ordered_broadcast(view_of(t, "DistributedDataParallel bucket order"), 0).wait();
    const int64_t* agreed = t.data_ptr<int64_t>();
    for (size_t k = 0; k < n; ++k) order[k] = size_t(agreed[k]);
    build(assignment());
    hook->buckets_rebuilt();
    rebuilt = true;
    arrival.clear();
  }

  // A training step starts: rank 0's tuner takes the step that ended and
  // chooses the next cap, which every rank gets by broadcast (collective).
  void tune() {
    tuned_at = iterations;
    std::shared_ptr<engine::Engine> eng = engine.lock();
    int64_t next_cap = 0, searching = 0;
    if (eng->rank() == 0)
      if (const auto t = eng->tune_step(this, cap)) next_cap = t->bucket_bytes, searching = t->searching ? 1 : 0;
    int64_t agreed[2] = {next_cap, searching};
    eng->submit_ordered_broadcast(BufferView{agreed, 2, DType::i64}, 0).wait();
    next_cap = agreed[0];
    tuning = agreed[1] != 0;
    if (next_cap > 0 && next_cap != cap) {
      cap = next_cap;
      build(assignment());
      hook->buckets_rebuilt();
    }
  }

  std::string missing_message() const {
    std::ostringstream os;
    std::vector<std::string> missing;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) missing.push_back(names[i]);
    os << "DistributedDataParallel: parameter " << (missing.empty() ? std::string("?") : missing[0])
       << " received no gradient on rank " << engine.rank()
       << " in the previous iteration, so its bucket's reduction never ran";
    if (missing.size() > 1) {
      os << " (" << missing.size() << " parameters without gradient:";
      for (size_t k = 0; k < missing.size() && k < 10; ++k) os << ' ' << missing[k];
      if (missing.size() > 10) os << " ...";
      os << ')';
    }
    os << ". Make every parameter take part in the loss, or construct DistributedDataParallel with "
          "find_unused_parameters = true";
    return os.str();
  }

};

Reducer::Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ReducerOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& impl = *impl_;
  COHORT_CHECK_AS(ConfigError, names.size() == params.size())
      << "Reducer: " << names.size() << " names for " << params.size() << " parameters";
  COHORT_CHECK_AS(ConfigError, !params.empty()) << "DistributedDataParallel: the module has no parameter that requires grad";
  COHORT_CHECK_AS(ConfigError, options.first_bucket_bytes > 0 && options.bucket_bytes > 0)
      << "DistributedDataParallel: bucket caps must be positive, got " << options.first_bucket_bytes << " and "
      << options.bucket_bytes;
  impl.engine = EngineRef(options.engine, "DistributedDataParallel");
  impl.hook = options.comm_hook ? options.comm_hook : allreduce_hook();
  impl.options = std::move(options);
  std::unordered_set<const void*> distinct;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string what = "DistributedDataParallel parameter '" + names[i] + "'";
    check_tensor(params[i], what);
    COHORT_CHECK_AS(ConfigError, params[i].requires_grad()) << what << " does not require grad";
    COHORT_CHECK_AS(ConfigError, params[i].is_contiguous()) << what << " is not contiguous";
    COHORT_CHECK_AS(ConfigError, distinct.insert(params[i].unsafeGetTensorImpl()).second)
        << what << " appears twice (shared parameters must be listed once)";
  }
  impl.names = std::move(names);
  impl.params = std::move(params);
  impl.ready.assign(impl.params.size(), 0);
  if (impl.options.find_unused_parameters) impl.used = at::zeros({int64_t(impl.params.size())}, at::kInt);
  impl.order.resize(impl.params.size());
  for (size_t k = 0; k < impl.order.size(); ++k) impl.order[k] = impl.order.size() - 1 - k;
  impl.cap = impl.options.bucket_bytes;
  impl.tuning = impl.options.autotune_bucket_bytes;
  impl.build(impl.assignment());
  // After accumulation (not a tensor hook, which runs before it): the
  // bucket then sees the accumulated .grad(), which no_sync relies on.
  std::weak_ptr<Impl> weak = impl_;
  impl.ready_hooks = std::make_unique<AccumulatedGradHooks>(impl.params, [weak](size_t i) {
    if (auto self = weak.lock()) self->on_ready(i);
  });
}

Reducer::~Reducer() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mutex);
  // Launched communication writes into the buckets: let it finish first.
  // (After cohort::shutdown() there is none: the engine stopped first.)
  try {
    std::shared_ptr<engine::Engine> eng = impl.engine.lock();
    // A search this Reducer drove and leaves unfinished stops at the
    // configured settings (no-op unless rank 0 drove one).
    if (impl.tuning) eng->end_tune_steps(&impl);
    for (size_t b = 0; b < impl.next_launch; ++b) {
      try {
        impl.hook->finish(impl.buckets[b].grad_bucket, *eng);
      } catch (...) {
      }
    }
  } catch (const ConfigError&) {
  }
  impl.ready_hooks->remove();
}

void Reducer::prepare_for_forward() {
  Impl& impl = *impl_;
  std::lock_guard lock(impl.mutex);
  COHORT_CHECK_AS(ConfigError, impl.ready_count == 0) << impl.missing_message();
  if (!impl.rebuilt && impl.iterations >= 1) impl.rebuild();
  // At a training step's start after a synchronised backward (the same
  // iteration count on every rank): not at evaluation forwards (a rank may
  // evaluate alone) or no_sync passes.
  if (impl.tuning && impl.iterations > impl.tuned_at && torch::GradMode::is_enabled()) impl.tune();
}

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  Impl& impl = *impl_;
  if (!impl.options.find_unused_parameters) return;
  std::lock_guard lock(impl.mutex);
  if (!impl.require_sync) return;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const at::Tensor& out : outputs) {
    if (!out.defined()) continue;
    if (auto fn = out.grad_fn()) stack.push_back(fn.get());
    if (auto acc = torch::autograd::impl::try_get_grad_accumulator(out)) stack.push_back(acc.get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges())
      if (edge.function) stack.push_back(edge.function.get());
  }
  for (size_t i = 0; i < impl.params.size(); ++i)
    if (!seen.count(impl.ready_hooks->accumulator(i)) && !impl.ready[i]) impl.mark_ready(i);
}

void Reducer::set_require_sync(bool require_sync) {
  std::lock_guard lock(impl_->mutex);
  impl_->require_sync = require_sync;
}

bool Reducer::require_sync() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->require_sync;
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::vector<size_t>> out;
  for (const auto& b : impl_->buckets) out.push_back(b.params);
  return out;
}

bool Reducer::buckets_rebuilt() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->rebuilt;
}

int64_t Reducer::iterations() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->iterations;
}

int64_t Reducer::bucket_bytes() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->cap;
}

}  // namespace cohort
