#include "cohort/torch/data_parallel/zero_optimizer.h"

#include <c10/core/CPUAllocator.h>
#include <torch/optim.h>
#include <torch/torch.h>

#include <algorithm>
#include <typeinfo>

#include "cohort/common/check.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/element_state.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_handle.h"
#include "cohort/torch/data_parallel/accumulated_grad_hooks.h"

namespace cohort {
namespace {

namespace optim = torch::optim;

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.numel() * t.element_size()) : 0; }

// The first group's options (lr, betas, ...) of `from` into `to`'s groups.
void copy_group_options(const optim::Optimizer& from, optim::Optimizer& to) {
  COHORT_CHECK(!from.param_groups().empty() && !to.param_groups().empty()) << "zero: an optimizer without groups";
  for (auto& group : to.param_groups()) group.set_options(from.param_groups().front().options().clone());
}

// Elements [offset, offset + count) of each of the state's (flat) fields.
ElementState state_slice(ElementState state, int64_t offset, int64_t count) {
  for (auto& field : state.fields)
    if (field.second.defined()) field.second = field.second.narrow(0, offset, count);
  return state;
}

// Collective: the state of a bucket's block (`stepped`), each field joined
// over the ranks into the whole bucket's. Steps are collective, so a bucket
// has state on every rank or on none.
std::optional<ElementState> joined_state(const optim::Optimizer& optimizer, const at::Tensor& stepped,
                                         engine::Engine* engine) {
  std::optional<ElementState> state = element_state_of(optimizer, stepped);
  if (state)
    for (auto& field : state->fields)
      if (field.second.defined()) field.second = allgather(field.second.contiguous(), {.engine = engine});
  return state;
}

}  // namespace

struct ZeroOptimizer::Bucket {
  at::Tensor parameters;             // flat: the members are views of it
  std::vector<size_t> members;       // parameter indices, in packing order
  std::vector<int64_t> offsets;      // each member's first element in the bucket
  int64_t numel = 0;                 // the members' elements (parameters holds a few more: padding)
  RowBlock block;                    // this rank's elements of the bucket
  // What `parameters`' storage holds. Stages 1, 2: always the parameters.
  // Stage 3: nothing (empty), the parameters arriving (an allgather into it
  // under way), the parameters, or the packed gradient being
  // reduce-scattered.
  enum class Holds { nothing, arriving, parameters, gradient } holds = Holds::parameters;
  size_t capacity = 0;               // stage 3: the bytes of the buffer behind the storage (a spare may be larger)
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
    storages_ = units();
    release_all();
    spares_.clear();
    peak_storages_ = 0;
  }
}

// ---- stage 3: units gathered and freed ----

size_t ZeroOptimizer::bucket_of_unit(int unit) const {
  COHORT_CHECK(options_.stage == 3 && unit >= 0 && unit < units()) << "zero: unit " << unit << " (stage 3 only)";
  return buckets_.size() - 1 - size_t(unit);
}

void ZeroOptimizer::note_storage(int change) {
  storages_ += change;
  peak_storages_ = std::max(peak_storages_, storages_);
}

void ZeroOptimizer::prefetch(int unit) {
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (bucket.holds == Bucket::Holds::arriving || bucket.holds == Bucket::Holds::parameters) return;
  COHORT_CHECK(bucket.holds == Bucket::Holds::nothing)
      << "zero: unit " << unit << " gathered again before the step (one use per step)";
  allocate_storage(bucket);
  // Straight into the storage: no second buffer, no copy. The engine
  // writes it without an ATen op, so the parameters' version counter
  // (which autograd's saved copies of them check) is not bumped.
  bucket.gathering = allgather_async(bucket.shard.detach(), {.engine = engine_.get(), .out = bucket.parameters});
  bucket.holds = Bucket::Holds::arriving;
  communicated_ += bucket.parameters.numel();
}

void ZeroOptimizer::gather(int unit) {
  prefetch(unit);
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (bucket.holds == Bucket::Holds::parameters) return;
  bucket.gathering.wait();
  bucket.gathering = TensorHandle();
  bucket.holds = Bucket::Holds::parameters;
}

// A unit's storage at full size, from the spare buffers when one is large
// enough: units gathered and freed in turn reuse each other's memory
// instead of mapping (and page-faulting) fresh buffers every time.
void ZeroOptimizer::allocate_storage(Bucket& bucket) {
  c10::StorageImpl* storage = bucket.parameters.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(bucket.parameters.numel()) * bucket.parameters.element_size();
  at::DataPtr data;
  bucket.capacity = bytes;
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->second < bytes) continue;
    data = std::move(it->first);
    bucket.capacity = it->second;  // the buffer's own size, kept for when it is a spare again
    spares_.erase(it);
    break;
  }
  if (!data) data = c10::GetCPUAllocator()->allocate(bytes);
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(bytes);
  note_storage(+1);
}

// Gives the unit's storage back (its parameters, arriving or gathered, or
// its packed gradient once the reduce-scatter has read it): kept as a spare
// while fewer than kSpares are, else freed. step() frees the spares: none
// is kept between steps.
void ZeroOptimizer::free_storage(Bucket& bucket) {
  using Holds = Bucket::Holds;
  if (bucket.holds == Holds::nothing) return;
  if (bucket.holds == Holds::arriving) bucket.gathering.wait();
  bucket.gathering = TensorHandle();
  if (bucket.holds == Holds::gradient && !bucket.averaged.defined()) bucket.averaged = bucket.reduction.wait();
  c10::StorageImpl* storage = bucket.parameters.storage().unsafeGetStorageImpl();
  at::DataPtr data = storage->set_data_ptr(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  constexpr size_t kSpares = 1;  // what backward's turnover needs: a freed unit, then a gathered one
  if (spares_.size() < kSpares) spares_.emplace_back(std::move(data), bucket.capacity);
  bucket.holds = Holds::nothing;
  note_storage(-1);
}

void ZeroOptimizer::release(int unit) {
  Bucket& bucket = buckets_[bucket_of_unit(unit)];
  if (bucket.holds == Bucket::Holds::parameters) free_storage(bucket);
}

void ZeroOptimizer::gather_all() {
  for (int u = 0; u < units(); ++u) prefetch(u);
  for (int u = 0; u < units(); ++u) gather(u);
}

void ZeroOptimizer::release_all() {
  for (Bucket& bucket : buckets_) free_storage(bucket);
}

void ZeroOptimizer::reshard() {
  finish_gathers();
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    COHORT_CHECK(bucket.holds == Bucket::Holds::parameters) << "zero: reshard() needs every unit gathered";
    if (options_.stage == 3) bucket.shard.copy_(bucket.parameters.narrow(0, bucket.block.offset, bucket.block.rows));
    if (bucket.master.defined()) bucket.master.copy_(bucket.shard);
  }
}

// Collectives still in flight write into (or read) the buckets: they are
// finished first, whatever their outcome (the error, if any, was or will be
// reported where the step failed).
ZeroOptimizer::~ZeroOptimizer() {
  for (Bucket& bucket : buckets_) {
    for (TensorHandle* handle : {&bucket.gathering, &bucket.reduction}) {
      if (!handle->valid()) continue;
      try {
        handle->wait();
      } catch (...) {
      }
    }
  }
}

int ZeroOptimizer::buckets() const { return int(buckets_.size()); }
int ZeroOptimizer::units() const { return options_.stage == 3 ? int(buckets_.size()) : 0; }

// Stage 3: once backward reaches unit `unit`, every later unit's backward
// has run, so what has not arrived of their gradients never will (a
// parameter the forward did not use): they go out now, with zeros, in
// bucket order. Otherwise their reduce-scatters would wait for step() while
// the gathers of the units before them went ahead, an order a rank without
// rows (which launches everything in step()) would not follow.
void ZeroOptimizer::backward_reached(int unit) {
  const size_t last = bucket_of_unit(unit);  // the buckets before it are the later units'
  while (next_launch_ < last) launch(next_launch_++);
}

void ZeroOptimizer::on_accumulated(size_t parameter) {
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  COHORT_CHECK(bucket.pending > 0 && bucket_of_[parameter] >= next_launch_)
      << "zero: a parameter's gradient arrived after its bucket was sent (one backward per step, and at stage 3 "
         "a unit's parameters used only inside the unit)";
  --bucket.pending;
  // Buckets go out in order on every rank (ordered collectives), whatever
  // order their gradients complete in.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void ZeroOptimizer::launch(size_t index) {
  Bucket& bucket = buckets_[index];
  torch::NoGradGuard no_grad;
  // Stage 1 keeps the full gradient in one flat buffer per bucket, which the
  // members' .grad() are views of from zero_grad() on (backward accumulates
  // straight into it); stage 2 packs into a reused buffer, stage 3 into the
  // unit's own storage (every node of backward that reads the unit's
  // parameters ran before the last of their gradients was accumulated), and
  // neither keeps a full gradient once the bucket is on its way.
  at::Tensor flat = options_.stage == 1   ? bucket.gradients
                    : options_.stage == 2 ? pack_buffer(index)
                                          : reuse_storage(index);
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
  // Stage 3: the unit backward needs next starts gathering before this
  // reduce-scatter (the same order on every rank, whatever order autograd
  // finished the two in), once this unit's gradients are packed and freed.
  if (options_.stage == 3 && index + 1 < buckets_.size()) prefetch(units() - 2 - int(index));
  // Stage 3 reduce-scatters the unit's storage itself (freed once the
  // reduction has read it): `flat` is an unowned view of it, with a version
  // counter of its own, so that writing the gradient did not bump the
  // parameters'.
  const at::Tensor& send = options_.stage == 3 ? bucket.parameters : flat;
  bucket.reduction = reduce_scatter_async(send, {.op = ReduceOp::avg, .engine = engine_.get()});
  communicated_ += flat.numel();
}

// Stage 3 packs a unit's gradient into the unit's storage, which then holds
// it until the reduce-scatter has read it (freed at the next unit's launch,
// or in step()): at most two unit-sized buffers exist at a time in backward
// (this one being reduced, the next being gathered), and none is kept
// between steps. The previous unit's storage is freed first.
at::Tensor ZeroOptimizer::reuse_storage(size_t index) {
  if (index > 0) free_storage(buckets_[index - 1]);
  Bucket& bucket = buckets_[index];
  using Holds = Bucket::Holds;
  // Backward never reached a unit it did not gather (a rank without rows,
  // an unused unit): its gradient is zeros, packed into storage of its own.
  if (bucket.holds == Holds::arriving) bucket.gathering.wait();
  bucket.gathering = TensorHandle();
  if (bucket.holds == Holds::nothing) allocate_storage(bucket);
  bucket.holds = Holds::gradient;  // the parameters are overwritten now
  c10::StorageImpl* storage = bucket.parameters.storage().unsafeGetStorageImpl();
  at::Tensor flat = at::from_blob(storage->data(), {bucket.parameters.numel()}, bucket.parameters.options());
  flat.narrow(0, bucket.numel, flat.numel() - bucket.numel).zero_();
  return flat;
}

// Stage 2 packs each bucket into one of two buffers of the largest bucket's
// size, in turn: bucket b reuses the buffer of bucket b - 2 once that one's
// reduce-scatter is done, so at most two full bucket gradients exist at a
// time and no step allocates (and page-faults) fresh ones.
at::Tensor ZeroOptimizer::pack_buffer(size_t index) {
  const size_t slot = index % pack_.size();
  if (!pack_[slot].defined()) {
    int64_t largest = 0;
    for (const Bucket& bucket : buckets_) largest = std::max(largest, bucket.parameters.numel());
    pack_[slot] = torch::empty({largest}, buckets_.front().parameters.options());
  }
  if (index >= pack_.size()) {
    Bucket& previous = buckets_[index - pack_.size()];
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
  peak_storages_ = storages_;
  communicated_ = 0;
}

void ZeroOptimizer::step() {
  finish_gathers();  // the optimizer writes this rank's blocks of the parameters
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
    // The next forward gathers the updated blocks (a prefetch a rank
    // started but never used, on a rank without rows, is finished and
    // dropped); nothing stays between steps.
    release_all();
    spares_.clear();
    rearm();
    return;
  }
  allgather_blocks();
  rearm();
}

// Stages 1 and 2: every rank's blocks into the full parameters, gathered
// in place (this rank's block is already where the output holds it; every
// backend takes such an allgather in place): no bucket-sized result
// allocated, faulted in and copied every step. The last bucket (the first
// layers') goes first: the next forward needs it first.
void ZeroOptimizer::allgather_blocks() {
  for (size_t b = buckets_.size(); b-- > 0;) {
    Bucket& bucket = buckets_[b];
    bucket.gathering = allgather_async(bucket.shard.detach(), {.engine = engine_.get(), .out = bucket.parameters});
    communicated_ += bucket.parameters.numel();
  }
  if (!options_.defer_gather) finish_gathers();
}

void ZeroOptimizer::finish_gather(size_t b) {
  if (options_.stage == 3) return;  // stage 3's gathers are its units'
  TensorHandle& gathering = buckets_.at(b).gathering;
  if (!gathering.valid()) return;
  gathering.wait();
  gathering = TensorHandle();
}

void ZeroOptimizer::finish_gathers() {
  for (size_t b = buckets_.size(); b-- > 0;) finish_gather(b);
}

std::unique_ptr<optim::Optimizer> ZeroOptimizer::consolidated(const OptimizerFactory& make,
                                                              const std::vector<at::Tensor>& parameters) {
  finish_gathers();
  std::unique_ptr<optim::Optimizer> full = make(parameters);
  COHORT_CHECK_AS(ConfigError, full != nullptr) << "zero: the optimizer factory returned no optimizer";
  COHORT_CHECK_AS(ConfigError, typeid(*full) == typeid(*optimizer_))
      << "zero: the factory made a " << optimizer_type_name(*full) << ", the sharded optimizer is a "
      << optimizer_type_name(*optimizer_);
  copy_group_options(*optimizer_, *full);
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    const std::optional<ElementState> joined = joined_state(*optimizer_, bucket.stepped(), engine_.get());
    if (!joined) continue;
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const at::Tensor& p = parameters_[bucket.members[i]];
      ElementState member = state_slice(*joined, bucket.offsets[i], p.numel());
      for (auto& field : member.fields)
        if (field.second.defined()) field.second = field.second.view(p.sizes()).clone();
      set_element_state(*full, p, member);
    }
  }
  return full;
}

void ZeroOptimizer::load_consolidated(const optim::Optimizer& full) {
  finish_gathers();
  COHORT_CHECK_AS(ConfigError, typeid(full) == typeid(*optimizer_))
      << "zero: the saved optimizer is a " << optimizer_type_name(full) << ", this job's a "
      << optimizer_type_name(*optimizer_);
  copy_group_options(full, *optimizer_);
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    std::vector<ElementState> members;
    for (size_t k : bucket.members)
      if (std::optional<ElementState> state = element_state_of(full, parameters_[k])) members.push_back(*state);
    if (members.empty()) {
      erase_element_state(*optimizer_, bucket.stepped());
      continue;
    }
    COHORT_CHECK_AS(ConfigError, members.size() == bucket.members.size())
        << "zero: the saved optimizer has state for some parameters of a bucket and not others";
    ElementState f = members.front();
    for (size_t field = 0; field < f.fields.size(); ++field) {
      if (!f.fields[field].second.defined()) continue;
      std::vector<at::Tensor> flat;
      for (const ElementState& m : members) flat.push_back(m.fields.at(field).second.reshape(-1));
      at::Tensor joined = torch::cat(flat);
      joined = torch::constant_pad_nd(joined, {0, bucket.parameters.numel() - joined.numel()});
      f.fields[field].second = joined.narrow(0, bucket.block.offset, bucket.block.rows).clone();
    }
    set_element_state(*optimizer_, bucket.stepped(), f);
  }
}

// ---- sharded checkpoints ----

void ZeroOptimizer::write_shard(TensorPieceWriter& out, const std::vector<std::string>& names) {
  finish_gathers();
  COHORT_CHECK_EQ(names.size(), parameters_.size()) << "zero: one name per parameter";
  torch::NoGradGuard no_grad;
  for (const Bucket& bucket : buckets_) {
    const std::optional<ElementState> state = element_state_of(*optimizer_, bucket.stepped());
    const int64_t begin = bucket.block.offset, end = begin + bucket.block.rows;
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      // This rank's elements of the member: its range in the bucket, cut
      // to the block.
      const at::Tensor& p = parameters_[bucket.members[i]];
      const std::string& name = names[bucket.members[i]];
      if (p.numel() == 0) {  // no elements to own: rank 0 records its shape
        if (engine_.rank() == 0) out.add(parameter_record(name), p.sizes(), 0, p.detach().reshape(-1));
        continue;
      }
      const int64_t first = std::max(begin, bucket.offsets[i]), last = std::min(end, bucket.offsets[i] + p.numel());
      if (first >= last) continue;
      const int64_t offset = first - bucket.offsets[i];
      auto mine = [&](const at::Tensor& block) { return block.narrow(0, first - begin, last - first); };
      out.add(parameter_record(name), p.sizes(), offset, mine(bucket.shard));
      if (bucket.master.defined()) out.add(master_record(name), p.sizes(), offset, mine(bucket.master));
      if (state) write_state_piece(out, name, p.sizes(), offset, state_slice(*state, first - begin, last - first));
    }
  }
}

void ZeroOptimizer::read_shard(const TensorPieceReader& in, const std::vector<std::string>& names) {
  finish_gathers();
  COHORT_CHECK_EQ(names.size(), parameters_.size()) << "zero: one name per parameter";
  const std::vector<std::string> fields = element_state_fields(*optimizer_);
  // This rank's part of a member: elements [offset, offset + count) of the
  // parameter, at `at` in the block.
  struct Part {
    size_t bucket, member;
    int64_t offset, count, at;
  };
  std::vector<Part> parts;
  // Per bucket, from all its members' records (so the same on every rank:
  // the buckets are stepped together): its optimizer step, if it has
  // state, and the fields the checkpoint holds.
  std::vector<std::optional<int64_t>> steps(buckets_.size());
  std::vector<std::vector<bool>> present(buckets_.size(), std::vector<bool>(fields.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const int64_t begin = bucket.block.offset, end = begin + bucket.block.rows;
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const at::Tensor& p = parameters_[bucket.members[i]];
      const std::string& name = names[bucket.members[i]];
      COHORT_CHECK_AS(ConfigError, in.contains(parameter_record(name)))
          << "zero: the checkpoint has no parameter '" << name << "'";
      COHORT_CHECK_AS(ConfigError, in.shape(parameter_record(name)) == p.sizes().vec())
          << "zero: parameter '" << name << "' is " << c10::IntArrayRef(in.shape(parameter_record(name)))
          << " in the checkpoint, " << p.sizes() << " in this model";
      if (in.contains(step_record(name))) {
        if (!steps[b]) {
          at::Tensor step = at::empty({1}, at::kLong);
          in.read_into(step_record(name), 0, step);
          steps[b] = step.item<int64_t>();
        }
        for (size_t f = 0; f < fields.size(); ++f)
          if (in.contains(state_record(name, fields[f]))) present[b][f] = true;
      }
      const int64_t first = std::max(begin, bucket.offsets[i]), last = std::min(end, bucket.offsets[i] + p.numel());
      if (first < last) parts.push_back({b, i, first - bucket.offsets[i], last - first, first - begin});
    }
  }
  // Everything this rank reads is there before anything changes.
  for (const Part& part : parts) {
    const std::string& name = names[buckets_[part.bucket].members[part.member]];
    std::vector<std::string> records{parameter_record(name)};
    if (buckets_[part.bucket].master.defined() && in.contains(master_record(name)))
      records.push_back(master_record(name));
    for (const std::string& field : fields)
      if (in.contains(state_record(name, field))) records.push_back(state_record(name, field));
    for (const std::string& record : records)
      COHORT_CHECK_AS(ConfigError, in.covers(record, part.offset, part.count))
          << "zero: the checkpoint's pieces of '" << record << "' do not hold its elements [" << part.offset << ", "
          << part.offset + part.count << ")";
  }

  torch::NoGradGuard no_grad;
  if (options_.stage == 3) release_all();  // gathered parameters would be stale
  std::vector<std::vector<at::Tensor>> blocks(buckets_.size(), std::vector<at::Tensor>(fields.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].shard.zero_();  // and the padding stays zero
    if (!steps[b]) continue;
    for (size_t f = 0; f < fields.size(); ++f)
      if (present[b][f]) blocks[b][f] = torch::zeros_like(buckets_[b].stepped());  // zeros: members without it
  }
  for (const Part& part : parts) {
    Bucket& bucket = buckets_[part.bucket];
    const std::string& name = names[bucket.members[part.member]];
    auto mine = [&](const at::Tensor& block) { return block.narrow(0, part.at, part.count); };
    in.read_into(parameter_record(name), part.offset, mine(bucket.shard));
    if (bucket.master.defined()) {
      if (in.contains(master_record(name))) in.read_into(master_record(name), part.offset, mine(bucket.master));
      else mine(bucket.master).copy_(mine(bucket.shard));
    }
    for (size_t f = 0; f < fields.size(); ++f)
      if (blocks[part.bucket][f].defined() && in.contains(state_record(name, fields[f])))
        in.read_into(state_record(name, fields[f]), part.offset, mine(blocks[part.bucket][f]));
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!steps[b]) {
      erase_element_state(*optimizer_, buckets_[b].stepped());
      continue;
    }
    ElementState state{.step = *steps[b]};
    for (size_t f = 0; f < fields.size(); ++f) state.fields.emplace_back(fields[f], blocks[b][f]);
    set_element_state(*optimizer_, buckets_[b].stepped(), state);
  }
  if (options_.stage != 3) allgather_blocks();
}

int64_t ZeroOptimizer::write_consolidated(TensorPieceWriter* out, const std::vector<std::string>& names) {
  finish_gathers();
  COHORT_CHECK_EQ(names.size(), parameters_.size()) << "zero: one name per parameter";
  torch::NoGradGuard no_grad;
  int64_t most = 0;
  for (Bucket& bucket : buckets_) {
    auto whole = [&](const at::Tensor& block) { return allgather(block.contiguous(), {.engine = engine_.get()}); };
    const at::Tensor values = whole(bucket.shard);
    const at::Tensor master = bucket.master.defined() ? whole(bucket.master) : at::Tensor();
    const std::optional<ElementState> state = joined_state(*optimizer_, bucket.stepped(), engine_.get());
    int64_t bytes = bytes_of(values) + bytes_of(master);
    if (state)
      for (const auto& field : state->fields) bytes += bytes_of(field.second);
    most = std::max(most, bytes);
    if (out == nullptr) continue;
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const at::Tensor& p = parameters_[bucket.members[i]];
      const std::string& name = names[bucket.members[i]];
      out->add(parameter_record(name), p.sizes(), 0, values.narrow(0, bucket.offsets[i], p.numel()));
      if (master.defined()) out->add(master_record(name), p.sizes(), 0, master.narrow(0, bucket.offsets[i], p.numel()));
      if (state) write_state_piece(*out, name, p.sizes(), 0, state_slice(*state, bucket.offsets[i], p.numel()));
    }
  }
  return most;
}

ZeroMemory ZeroOptimizer::memory() const {
  ZeroMemory m;
  for (const Bucket& bucket : buckets_) {
    // Stage 3: this rank's block, and the full unit only while gathered.
    if (options_.stage == 3) m.parameters += bytes_of(bucket.shard);
    m.parameters += bytes_of(bucket.master);
    if (bucket.holds == Bucket::Holds::parameters || bucket.holds == Bucket::Holds::arriving)
      m.parameters += bytes_of(bucket.parameters);
    if (bucket.holds == Bucket::Holds::gradient) m.buffers += bytes_of(bucket.parameters);
    // Stage 1: the kept flat gradient (the .grad() and the shard's are views
    // of it); stage 2: this rank's averaged block alone.
    m.gradients += options_.stage == 1 ? bytes_of(bucket.gradients) : bytes_of(bucket.stepped().grad());
  }
  m.optimizer = optimizer_state_bytes(*optimizer_);
  for (const at::Tensor& buffer : pack_) m.buffers += bytes_of(buffer);
  return m;
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
