#include "cohort/torch/data_parallel/zero_optimizer.h"

#include <ATen/native/Resize.h>
#include <c10/util/typeid.h>
#include <torch/optim.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <typeinfo>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_handle.h"
#include "cohort/torch/data_parallel/accumulated_grad_hooks.h"

namespace cohort {
namespace {

namespace optim = torch::optim;

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.numel() * t.element_size()) : 0; }

std::string type_name_of(const optim::Optimizer& optimizer) { return c10::demangle(typeid(optimizer).name()); }

// ConfigError unless `optimizer` is one whose state is per element.
void check_per_element(const optim::Optimizer& optimizer) {
  const bool known = dynamic_cast<const optim::SGD*>(&optimizer) || dynamic_cast<const optim::Adam*>(&optimizer) ||
                     dynamic_cast<const optim::AdamW*>(&optimizer) ||
                     dynamic_cast<const optim::Adagrad*>(&optimizer) ||
                     dynamic_cast<const optim::RMSprop*>(&optimizer);
  COHORT_CHECK_AS(ConfigError, known)
      << "zero: the optimizer " << type_name_of(optimizer)
      << " is not one whose state is per element (SGD, Adam, AdamW, Adagrad, RMSprop), so it cannot be split over "
         "the ranks";
}

// One parameter's optimizer state as data: the step count (0 where the
// optimizer keeps none) and its tensors in a fixed order per type
// (undefined where unused, e.g. SGD without momentum).
struct StateFields {
  int64_t step = 0;
  std::vector<at::Tensor> tensors;
};

StateFields fields_of(const optim::OptimizerParamState& state) {
  if (const auto* s = dynamic_cast<const optim::SGDParamState*>(&state)) return {0, {s->momentum_buffer()}};
  if (const auto* s = dynamic_cast<const optim::AdamParamState*>(&state))
    return {s->step(), {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()}};
  if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(&state))
    return {s->step(), {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()}};
  if (const auto* s = dynamic_cast<const optim::AdagradParamState*>(&state)) return {s->step(), {s->sum()}};
  if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(&state))
    return {s->step(), {s->square_avg(), s->momentum_buffer(), s->grad_avg()}};
  COHORT_THROW(ConfigError) << "zero: optimizer state of an unknown type";
}

// A state of the type `optimizer` keeps, from fields.
std::unique_ptr<optim::OptimizerParamState> make_state(const optim::Optimizer& optimizer, const StateFields& f) {
  const auto& t = f.tensors;
  if (dynamic_cast<const optim::SGD*>(&optimizer)) {
    auto s = std::make_unique<optim::SGDParamState>();
    s->momentum_buffer(t.at(0));
    return s;
  }
  if (dynamic_cast<const optim::Adam*>(&optimizer)) {
    auto s = std::make_unique<optim::AdamParamState>();
    s->step(f.step), s->exp_avg(t.at(0)), s->exp_avg_sq(t.at(1)), s->max_exp_avg_sq(t.at(2));
    return s;
  }
  if (dynamic_cast<const optim::AdamW*>(&optimizer)) {
    auto s = std::make_unique<optim::AdamWParamState>();
    s->step(f.step), s->exp_avg(t.at(0)), s->exp_avg_sq(t.at(1)), s->max_exp_avg_sq(t.at(2));
    return s;
  }
  if (dynamic_cast<const optim::Adagrad*>(&optimizer)) {
    auto s = std::make_unique<optim::AdagradParamState>();
    s->step(f.step), s->sum(t.at(0));
    return s;
  }
  check_per_element(optimizer);
  auto s = std::make_unique<optim::RMSpropParamState>();
  s->step(f.step), s->square_avg(t.at(0)), s->momentum_buffer(t.at(1)), s->grad_avg(t.at(2));
  return s;
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

const optim::OptimizerParamState* state_of(const optim::Optimizer& optimizer, const at::Tensor& p) {
  const auto& map = optimizer.state();
  const auto it = map.find(state_key(map, p));
  return it == map.end() ? nullptr : it->second.get();
}

void set_state(optim::Optimizer& optimizer, const at::Tensor& p, std::unique_ptr<optim::OptimizerParamState> state) {
  auto& map = optimizer.state();
  map[state_key(map, p)] = std::move(state);
}

// The first group's options (lr, betas, ...) of `from` into `to`'s groups.
void copy_group_options(const optim::Optimizer& from, optim::Optimizer& to) {
  COHORT_CHECK(!from.param_groups().empty() && !to.param_groups().empty()) << "zero: an optimizer without groups";
  for (auto& group : to.param_groups()) group.set_options(from.param_groups().front().options().clone());
}

}  // namespace

struct ZeroOptimizer::Bucket {
  at::Tensor parameters;             // flat: the members are views of it
  std::vector<size_t> members;       // parameter indices, in packing order
  std::vector<int64_t> offsets;      // each member's first element in the bucket
  int64_t numel = 0;                 // the members' elements (parameters holds a few more: padding)
  RowBlock block;                    // this rank's elements of the bucket
  bool gathered = true;              // stage 3: the storage holds the full parameters
  TensorHandle gathering;            // stage 3: the allgather under way
  at::Tensor shard;                  // parameters.narrow(block) (stage 3: its own copy)
  at::Tensor master;                 // half-precision parameters: the fp32 copy of the block
  // What the optimizer steps: the master copy, or the block itself.
  at::Tensor& stepped() { return master.defined() ? master : shard; }
  const at::Tensor& stepped() const { return master.defined() ? master : shard; }
  at::Tensor gradients;              // stage 1: the bucket's flat gradient, kept (the members' .grad() view it)
  size_t pending = 0;                // members whose gradient has not arrived this step
  TensorHandle reduction;            // the bucket's reduce-scatter, once launched
  at::Tensor averaged;               // its result, once waited for
};

ZeroOptimizer::ZeroOptimizer(const std::vector<at::Tensor>& parameters, const OptimizerFactory& make,
                             ZeroOptions options)
    : options_(options), engine_(options.engine, "zero"), parameters_(parameters) {
  COHORT_CHECK_AS(ConfigError, options_.stage >= 1 && options_.stage <= 3)
      << "zero: stage must be 1, 2 or 3, got " << options_.stage;
  COHORT_CHECK_AS(ConfigError, (options_.stage == 3) == !options_.units.empty())
      << "zero: stage 3 takes its units (and only stage 3 does)";
  COHORT_CHECK_AS(ConfigError, options_.stage != 3 || options_.overlap)
      << "zero: stage 3 frees each unit during backward (overlap must be on)";
  COHORT_CHECK_AS(ConfigError, options_.bucket_bytes > 0) << "zero: bucket_bytes must be positive";
  COHORT_CHECK_AS(ConfigError, !parameters_.empty()) << "zero: no trainable parameters";
  const auto dtype = parameters_.front().scalar_type();
  for (const at::Tensor& p : parameters_) {
    COHORT_CHECK_AS(ConfigError, p.is_leaf() && p.requires_grad()) << "zero: parameters must be trainable leaves";
    COHORT_CHECK_AS(ConfigError, p.scalar_type() == dtype)
        << "zero: all trainable parameters must share one dtype, got " << dtype << " and " << p.scalar_type();
  }
  const int size = engine_.size(), rank = engine_.rank();
  // Half-precision parameters are stepped in float32 (master weights).
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  const at::ScalarType master_dtype = options_.master_dtype != at::ScalarType::Undefined ? options_.master_dtype
                                      : half                                              ? at::kFloat
                                                                                          : dtype;

  // Pack in reverse order (backward's), closing a bucket at the cap; stage
  // 3's buckets are its units, the last one first.
  bucket_of_.assign(parameters_.size(), parameters_.size());
  std::vector<std::vector<size_t>> groups;
  if (options_.stage == 3) {
    for (auto unit = options_.units.rbegin(); unit != options_.units.rend(); ++unit) {
      COHORT_CHECK_AS(ConfigError, !unit->empty()) << "zero: a stage 3 unit without parameters";
      groups.emplace_back(unit->rbegin(), unit->rend());
      for (size_t k : *unit) {
        COHORT_CHECK_AS(ConfigError, k < parameters_.size() && bucket_of_[k] == parameters_.size())
            << "zero: parameter " << k << " is out of range or in two units";
        bucket_of_[k] = 0;  // set for real below
      }
    }
    for (size_t k = 0; k < parameters_.size(); ++k)
      COHORT_CHECK_AS(ConfigError, bucket_of_[k] != parameters_.size()) << "zero: parameter " << k << " is in no unit";
  } else {
    const int64_t cap = std::max<int64_t>(1, options_.bucket_bytes / parameters_.front().element_size());
    groups.emplace_back();
    int64_t filled = 0;
    for (size_t k = parameters_.size(); k-- > 0;) {
      const int64_t n = parameters_[k].numel();
      if (!groups.back().empty() && filled + n > cap) {
        groups.emplace_back();
        filled = 0;
      }
      groups.back().push_back(k);
      filled += n;
    }
  }
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> shards;
  for (const auto& members : groups) {
    Bucket bucket;
    int64_t n = 0;
    for (size_t k : members) {
      bucket.members.push_back(k);
      bucket.offsets.push_back(n);
      n += parameters_[k].numel();
    }
    // Padded to a multiple of the ranks, so that every rank's block has the
    // same size and the collectives need no padded copies; the padding
    // stays zero (zero gradients, never read).
    const int64_t padded = (n + size - 1) / size * size;
    bucket.parameters = torch::zeros({padded}, parameters_.front().options().requires_grad(false));
    for (size_t i = 0; i < members.size(); ++i) {
      at::Tensor& p = parameters_[members[i]];
      at::Tensor view = bucket.parameters.narrow(0, bucket.offsets[i], p.numel());
      view.copy_(p.reshape(-1));
      // The parameter keeps its identity (its autograd node, the module's
      // reference), its storage becomes the bucket's.
      p.set_data(view.view(p.sizes()));
      bucket_of_[members[i]] = buckets_.size();
    }
    bucket.numel = n;
    bucket.block = {.offset = padded / size * rank, .rows = padded / size};
    bucket.shard = bucket.parameters.narrow(0, bucket.block.offset, bucket.block.rows);
    // Stage 3 keeps the block apart (the bucket's storage comes and goes).
    if (options_.stage == 3) bucket.shard = bucket.shard.clone();
    if (master_dtype != dtype) bucket.master = bucket.shard.detach().to(master_dtype);
    bucket.pending = members.size();
    shards.push_back(bucket.stepped());
    numel_ += n;
    owned_ += bucket.block.rows;
    buckets_.push_back(std::move(bucket));
  }
  optimizer_ = make(shards);
  COHORT_CHECK_AS(ConfigError, optimizer_ != nullptr) << "zero: the optimizer factory returned no optimizer";
  check_per_element(*optimizer_);
  if (options_.overlap)
    hooks_ = std::make_unique<AccumulatedGradHooks>(parameters_, [this](size_t k) { on_accumulated(k); });
  if (options_.stage == 3) {
    gathered_ = units();
    release_all();
    peak_gathered_ = 0;
  }
}

// ---- stage 3: units gathered and freed ----

size_t ZeroOptimizer::bucket_of_unit(int unit) const {
  COHORT_CHECK(options_.stage == 3 && unit >= 0 && unit < units()) << "zero: unit " << unit << " (stage 3 only)";
  return buckets_.size() - 1 - size_t(unit);
}

void ZeroOptimizer::note_gathered(int change) {
  gathered_ += change;
  peak_gathered_ = std::max(peak_gathered_, gathered_);
}

void ZeroOptimizer::prefetch(int unit) {
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (bucket.gathered || bucket.gathering.valid()) return;
  bucket.gathering = allgather_async(bucket.shard.detach(), {.engine = engine_.get()});
  communicated_ += bucket.parameters.numel();
  note_gathered(+1);  // the allgather's result is a full copy already
}

void ZeroOptimizer::gather(int unit) {
  prefetch(unit);
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (bucket.gathered) return;
  at::Tensor full = bucket.gathering.wait();
  bucket.gathering = TensorHandle();
  // The storage comes back at full size without an ATen in-place op: the
  // parameters are views of it, and autograd's saved copies of them check a
  // version counter that one would bump. The allgather's own buffer is
  // adopted when nothing else holds it (no second allocation, no copy);
  // otherwise the storage is reallocated and filled by a plain copy.
  c10::StorageImpl* storage = bucket.parameters.storage().unsafeGetStorageImpl();
  c10::StorageImpl* result = full.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(full.numel()) * full.element_size();
  if (full.storage_offset() == 0 && full.is_contiguous() && result->nbytes() == bytes &&
      full.storage().use_count() == 1 && full.use_count() == 1) {
    storage->set_data_ptr_noswap(result->set_data_ptr(at::DataPtr(nullptr, full.device())));
    result->set_nbytes(0);
    storage->set_nbytes(bytes);
  } else {
    at::native::resize_bytes_cpu(storage, bytes);
    std::memcpy(storage->data(), full.data_ptr(), bytes);
  }
  bucket.gathered = true;
}

void ZeroOptimizer::release(int unit) {
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (!bucket.gathered) return;
  at::native::resize_bytes_cpu(bucket.parameters.storage().unsafeGetStorageImpl(), 0);
  bucket.gathered = false;
  note_gathered(-1);
}

void ZeroOptimizer::gather_all() {
  for (int u = 0; u < units(); ++u) prefetch(u);
  for (int u = 0; u < units(); ++u) gather(u);
}

void ZeroOptimizer::release_all() {
  for (int u = 0; u < units(); ++u) release(u);
}

void ZeroOptimizer::reshard() {
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    COHORT_CHECK(bucket.gathered) << "zero: reshard() needs every unit gathered";
    if (options_.stage == 3) bucket.shard.copy_(bucket.parameters.narrow(0, bucket.block.offset, bucket.block.rows));
    if (bucket.master.defined()) bucket.master.copy_(bucket.shard);
  }
}

ZeroOptimizer::~ZeroOptimizer() = default;

int ZeroOptimizer::buckets() const { return int(buckets_.size()); }
int ZeroOptimizer::units() const { return options_.stage == 3 ? int(buckets_.size()) : 0; }

void ZeroOptimizer::on_accumulated(size_t parameter) {
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  COHORT_CHECK(bucket.pending > 0) << "zero: a parameter's gradient arrived twice in one step (one backward per "
                                      "step; call step() before the next backward)";
  --bucket.pending;
  // Buckets go out in order on every rank (ordered collectives), whatever
  // order their gradients complete in.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void ZeroOptimizer::launch(size_t index) {
  Bucket& bucket = buckets_[index];
  torch::NoGradGuard no_grad;
  // Stage 3: the unit backward needs next starts gathering before this
  // reduce-scatter (the same order on every rank, whatever order autograd
  // finished the two in).
  if (options_.stage == 3 && index + 1 < buckets_.size()) prefetch(units() - 2 - int(index));
  // Stage 1 keeps the full gradient in one flat buffer per bucket, which the
  // members' .grad() are views of from zero_grad() on (backward accumulates
  // straight into it); stages 2 and 3 pack into a reused buffer and keep no
  // full gradient once the bucket is on its way.
  at::Tensor flat = options_.stage == 1 ? bucket.gradients : pack_buffer(index);
  for (size_t i = 0; i < bucket.members.size(); ++i) {
    at::Tensor& p = parameters_[bucket.members[i]];
    at::Tensor slot = flat.narrow(0, bucket.offsets[i], p.numel());
    const bool in_place = p.grad().defined() && p.grad().data_ptr() == slot.data_ptr();
    // A parameter the forward did not reach adds zeros (Horovod's rule).
    if (!in_place) {
      if (p.grad().defined()) slot.copy_(p.grad().reshape(-1)); else slot.zero_();
    }
    p.mutable_grad() = options_.stage == 1 ? slot.view(p.sizes()) : at::Tensor();
  }
  bucket.reduction = reduce_scatter_async(flat, {.op = ReduceOp::avg, .engine = engine_.get()});
  communicated_ += flat.numel();
  // Every node of backward that reads the unit's parameters ran before the
  // last of their gradients was accumulated.
  if (options_.stage == 3) release(units() - 1 - int(index));
}

// Stage 2 packs each bucket into one of two buffers of the largest bucket's
// size, in turn: bucket b reuses the buffer of bucket b - 2 once that one's
// reduce-scatter is done, so at most two full bucket gradients exist at a
// time and no step allocates (and page-faults) fresh ones. Stage 3, whose
// peak is what it is for, keeps one: a unit's gradient is packed once the
// previous unit's reduce-scatter has read its own.
at::Tensor ZeroOptimizer::pack_buffer(size_t index) {
  const size_t slots = options_.stage == 3 ? 1 : pack_.size();
  const size_t slot = index % slots;
  if (!pack_[slot].defined()) {
    int64_t largest = 0;
    for (const Bucket& bucket : buckets_) largest = std::max(largest, bucket.parameters.numel());
    pack_[slot] = torch::empty({largest}, buckets_.front().parameters.options());
  }
  if (index >= slots) {
    Bucket& previous = buckets_[index - slots];
    if (!previous.averaged.defined()) previous.averaged = previous.reduction.wait();
  }
  // launch() writes every member's slot (zeros for a missing gradient):
  // only the padding needs clearing.
  const Bucket& bucket = buckets_[index];
  at::Tensor flat = pack_[slot].narrow(0, 0, bucket.parameters.numel());
  flat.narrow(0, bucket.numel, flat.numel() - bucket.numel).zero_();
  return flat;
}

// Every bucket waits for all its members again, with no reduction.
void ZeroOptimizer::rearm() {
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.reduction = TensorHandle();
    bucket.averaged = at::Tensor();
  }
  next_launch_ = 0;
}

void ZeroOptimizer::zero_grad() {
  torch::NoGradGuard no_grad;
  rearm();
  for (at::Tensor& p : parameters_) p.mutable_grad() = at::Tensor();
  for (Bucket& bucket : buckets_) {
    bucket.stepped().mutable_grad() = at::Tensor();
    if (options_.stage != 1) continue;
    if (!bucket.gradients.defined()) bucket.gradients = torch::zeros_like(bucket.parameters);
    else bucket.gradients.zero_();
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      at::Tensor& p = parameters_[bucket.members[i]];
      p.mutable_grad() = bucket.gradients.narrow(0, bucket.offsets[i], p.numel()).view(p.sizes());
    }
  }
  peak_gathered_ = gathered_;
  communicated_ = 0;
}

void ZeroOptimizer::step() {
  // Buckets with a parameter backward never reached.
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  // Hybrid: the group's averages, averaged over the replicas (all buckets
  // in flight at once).
  std::vector<TensorHandle> across;
  if (options_.replica_engine != nullptr) {
    for (Bucket& bucket : buckets_) {
      if (!bucket.averaged.defined()) bucket.averaged = bucket.reduction.wait();
      across.push_back(
          allreduce_async_(bucket.averaged, {.op = ReduceOp::avg, .engine = options_.replica_engine}));
      communicated_ += 2 * bucket.averaged.numel();
    }
    for (TensorHandle& h : across) h.wait();
  }
  for (Bucket& bucket : buckets_) {
    const at::Tensor averaged = bucket.averaged.defined() ? bucket.averaged : bucket.reduction.wait();
    at::Tensor gradient = averaged;
    if (options_.stage == 1) {
      // In place: this rank's block of the kept gradient is the average.
      gradient = bucket.gradients.narrow(0, bucket.block.offset, bucket.block.rows);
      gradient.copy_(averaged);
    }
    bucket.stepped().mutable_grad() = gradient.to(bucket.stepped().scalar_type());
  }
  optimizer_->step();
  {
    // Master weights: the updated block, rounded to the parameters' dtype.
    torch::NoGradGuard no_grad;
    for (Bucket& bucket : buckets_)
      if (bucket.master.defined()) bucket.shard.copy_(bucket.master);
  }
  if (options_.stage == 3) {
    // The next forward gathers the updated blocks; a prefetch a rank
    // started but never used (a rank without rows) is finished and dropped.
    for (Bucket& bucket : buckets_) {
      if (bucket.gathering.valid()) {
        bucket.gathering.wait();
        note_gathered(-1);
      }
      bucket.gathering = TensorHandle();
    }
    release_all();
    rearm();
    return;
  }
  std::vector<TensorHandle> gathers;
  for (Bucket& bucket : buckets_) {
    gathers.push_back(allgather_async(bucket.shard.detach(), {.engine = engine_.get()}));
    communicated_ += bucket.parameters.numel();
  }
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) buckets_[b].parameters.copy_(gathers[b].wait());
  rearm();
}

std::unique_ptr<optim::Optimizer> ZeroOptimizer::consolidated(const OptimizerFactory& make,
                                                              const std::vector<at::Tensor>& parameters) {
  std::unique_ptr<optim::Optimizer> full = make(parameters);
  COHORT_CHECK_AS(ConfigError, full != nullptr) << "zero: the optimizer factory returned no optimizer";
  COHORT_CHECK_AS(ConfigError, typeid(*full) == typeid(*optimizer_))
      << "zero: the factory made a " << type_name_of(*full) << ", the sharded optimizer is a "
      << type_name_of(*optimizer_);
  copy_group_options(*optimizer_, *full);
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    // Steps are collective, so a bucket has state on every rank or on none.
    const optim::OptimizerParamState* state = state_of(*optimizer_, bucket.stepped());
    if (state == nullptr) continue;
    const StateFields mine = fields_of(*state);
    std::vector<at::Tensor> joined;
    for (const at::Tensor& t : mine.tensors)
      joined.push_back(t.defined() ? allgather(t.contiguous(), {.engine = engine_.get()}) : at::Tensor());
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const at::Tensor& p = parameters_[bucket.members[i]];
      StateFields f{.step = mine.step};
      for (const at::Tensor& t : joined)
        f.tensors.push_back(t.defined() ? t.narrow(0, bucket.offsets[i], p.numel()).view(p.sizes()).clone()
                                        : at::Tensor());
      set_state(*full, p, make_state(*full, f));
    }
  }
  return full;
}

void ZeroOptimizer::load_consolidated(const optim::Optimizer& full) {
  COHORT_CHECK_AS(ConfigError, typeid(full) == typeid(*optimizer_))
      << "zero: the saved optimizer is a " << type_name_of(full) << ", this job's a " << type_name_of(*optimizer_);
  copy_group_options(full, *optimizer_);
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    std::vector<StateFields> members;
    for (size_t k : bucket.members)
      if (const optim::OptimizerParamState* state = state_of(full, parameters_[k]))
        members.push_back(fields_of(*state));
    if (members.empty()) {
      optimizer_->state().erase(state_key(optimizer_->state(), bucket.stepped()));
      continue;
    }
    COHORT_CHECK_AS(ConfigError, members.size() == bucket.members.size())
        << "zero: the saved optimizer has state for some parameters of a bucket and not others";
    StateFields f{.step = members.front().step};
    for (size_t field = 0; field < members.front().tensors.size(); ++field) {
      if (!members.front().tensors[field].defined()) {
        f.tensors.emplace_back();
        continue;
      }
      std::vector<at::Tensor> flat;
      for (const StateFields& m : members) flat.push_back(m.tensors.at(field).reshape(-1));
      at::Tensor joined = torch::cat(flat);
      joined = torch::constant_pad_nd(joined, {0, bucket.parameters.numel() - joined.numel()});
      f.tensors.push_back(joined.narrow(0, bucket.block.offset, bucket.block.rows).clone());
    }
    set_state(*optimizer_, bucket.stepped(), make_state(*optimizer_, f));
  }
}

ZeroMemory ZeroOptimizer::memory() const {
  ZeroMemory m;
  for (const Bucket& bucket : buckets_) {
    // Stage 3: this rank's block, and the full unit only while gathered.
    if (options_.stage == 3) m.parameters += bytes_of(bucket.shard);
    m.parameters += bytes_of(bucket.master);
    if (bucket.gathered) m.parameters += bytes_of(bucket.parameters);
    // Stage 1: the kept flat gradient (the .grad() and the shard's are views
    // of it); stage 2: this rank's averaged block alone.
    m.gradients += options_.stage == 1 ? bytes_of(bucket.gradients) : bytes_of(bucket.stepped().grad());
  }
  m.optimizer = optimizer_state_bytes(*optimizer_);
  for (const at::Tensor& buffer : pack_) m.buffers += bytes_of(buffer);
  return m;
}

int64_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  check_per_element(optimizer);
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const optim::OptimizerParamState* state = entry.second.get();
    if (const auto* s = dynamic_cast<const optim::SGDParamState*>(state)) {
      bytes += bytes_of(s->momentum_buffer());
    } else if (const auto* s = dynamic_cast<const optim::AdamParamState*>(state)) {
      bytes += bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
    } else if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(state)) {
      bytes += bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
    } else if (const auto* s = dynamic_cast<const optim::AdagradParamState*>(state)) {
      bytes += bytes_of(s->sum());
    } else if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(state)) {
      bytes += bytes_of(s->square_avg()) + bytes_of(s->momentum_buffer()) + bytes_of(s->grad_avg());
    }
  }
  return bytes;
}

double zero_bytes_per_rank(double psi, double b, double k, int stage, int world) {
  COHORT_CHECK_AS(ConfigError, stage >= 0 && stage <= 3 && world >= 1 && psi >= 0)
      << "zero_bytes_per_rank: stage " << stage << ", world " << world << ", psi " << psi;
  const double n = world;
  switch (stage) {
    case 0: return psi * (b + b + k);
    case 1: return psi * (b + b) + psi * k / n;
    case 2: return psi * b + psi * (b + k) / n;
    default: return psi * (b + b + k) / n;
  }
}

}  // namespace cohort
