#include "cohort/torch/core/elastic_state.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <optional>
#include <sstream>

#include "cohort/comm/create.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/element_state.h"
#include "cohort/torch/core/optimizer_archive.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace {

// The next epoch's world; false when it leaves this process out.
bool reform_or_leave() {
  try {
    reform();
    return true;
  } catch (const comm::ElasticLeave& leave) {
    COHORT_LOG(info) << "elastic: " << leave.what();
    return false;
  }
}

std::vector<at::Tensor> model_tensors(torch::nn::Module& model) {
  std::vector<at::Tensor> all = model.parameters();
  for (const at::Tensor& b : model.buffers()) all.push_back(b);
  return all;
}

std::vector<at::Tensor> optimizer_parameters(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> all;
  for (const auto& group : optimizer.param_groups())
    for (const at::Tensor& p : group.params()) all.push_back(p);
  return all;
}

// `to` becomes a copy of `from`, reusing its storage when the shape allows.
void copy_into(at::Tensor& to, const at::Tensor& from) {
  if (!from.defined()) {
    to = at::Tensor();
  } else if (to.defined() && to.sizes() == from.sizes() && to.dtype() == from.dtype()) {
    to.copy_(from);
  } else {
    to = from.detach().clone();
  }
}

}  // namespace

struct ElasticState::Snapshot {
  int64_t serial = 0;
  std::vector<at::Tensor> model;                     // parameters, then buffers
  std::vector<std::optional<ElementState>> states;   // per optimizer parameter (per-element optimizers)
  std::map<std::string, std::string> values;        // tracked values; "" holds other optimizers' state
  std::vector<double> lrs;                           // per param group
  int64_t world = 1;                                 // size() at the commit
  std::map<std::string, int64_t> counters;
  std::map<std::string, at::Tensor> tracked;
};

ElasticState::ElasticState(torch::nn::Module& model, torch::optim::Optimizer& optimizer)
    : model_(model), optimizer_(optimizer), per_element_(is_per_element(optimizer)) {}

ElasticState::~ElasticState() = default;

int64_t& ElasticState::counter(const std::string& name) { return counters_[name]; }

void ElasticState::track(const std::string& name, at::Tensor tensor) {
  COHORT_CHECK_AS(ConfigError, tensor.defined()) << "ElasticState::track('" << name << "'): an undefined tensor";
  tracked_[name] = std::move(tensor);
}

void ElasticState::track(const std::string& name, std::function<std::string()> save,
                         std::function<void(const std::string&)> load) {
  COHORT_CHECK_AS(ConfigError, !name.empty() && save && load)
      << "ElasticState::track('" << name << "'): a value needs a name, save() and load()";
  values_[name] = {std::move(save), std::move(load)};
}

void ElasticState::tally(const std::string& name, at::Tensor pending, at::Tensor total) {
  COHORT_CHECK_AS(ConfigError, pending.defined() && total.defined() && pending.sizes() == total.sizes() &&
                                   pending.scalar_type() == at::kDouble && total.scalar_type() == at::kDouble &&
                                   pending.is_contiguous())
      << "ElasticState::tally('" << name << "'): pending and total must be float64 tensors of one shape";
  track("tally/" + name, total);
  tallies_[name] = {std::move(pending), std::move(total)};
}

void ElasticState::shard(ElasticShards& shards) {
  COHORT_CHECK_AS(ConfigError, !commit_ && !scale_lr_)
      << "ElasticState::shard(): before the first commit, and without learning-rate scaling";
  shards_ = &shards;
}

void ElasticState::scale_learning_rate_with_world(bool on) {
  COHORT_CHECK_AS(ConfigError, !on || !shards_)
      << "ElasticState: learning-rate scaling needs the optimizer, which a sharded state leaves to its shards";
  scale_lr_ = on;
}

int ElasticState::member_rank() const {
  if (engine::Engine* g = group()) return g->rank();
  return initialized() ? rank() : 0;
}

int ElasticState::members() const {
  if (engine::Engine* g = group()) return g->size();
  return initialized() ? size() : 1;
}

namespace {

// Binds the members' group (set_group()) to this thread while it lives, so
// that the collectives of a commit or sync run on it.
struct GroupScope {
  explicit GroupScope(engine::Engine* group) {
    if (group) scope.emplace(*group);
  }
  std::optional<EngineScope> scope;
};

}  // namespace

void ElasticState::zero_pending() {
  for (auto& [name, t] : tallies_) t.pending.zero_();
}

void ElasticState::take(Snapshot& s) const {
  torch::NoGradGuard no_grad;
  // The values first: a save may fail (a strategy's own state, which the
  // parameter_server strategy keeps on its servers) and must leave `s`, the
  // commit before, whole.
  std::map<std::string, std::string> values;
  for (const auto& [name, value] : values_) values[name] = value.save();
  s.serial = serial_;
  s.world = members();
  s.counters = counters_;
  for (const auto& [name, tensor] : tracked_) copy_into(s.tracked[name], tensor);
  for (auto& [name, bytes] : values) s.values[name] = std::move(bytes);
  if (shards_) return;  // the model and the optimizer are the shards'
  const std::vector<at::Tensor> tensors = model_tensors(model_);
  s.model.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) copy_into(s.model[i], tensors[i]);
  if (per_element_) {
    const std::vector<at::Tensor> params = optimizer_parameters(optimizer_);
    s.states.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const std::optional<ElementState> live = element_state_of(optimizer_, params[i]);
      if (!live) {
        s.states[i].reset();
        continue;
      }
      if (!s.states[i] || s.states[i]->fields.size() != live->fields.size()) s.states[i] = ElementState{};
      s.states[i]->step = live->step;
      s.states[i]->fields.resize(live->fields.size());
      for (size_t f = 0; f < live->fields.size(); ++f) {
        s.states[i]->fields[f].first = live->fields[f].first;
        copy_into(s.states[i]->fields[f].second, live->fields[f].second);
      }
    }
  } else {
    torch::serialize::OutputArchive archive;
    save_optimizer(optimizer_, archive);
    std::ostringstream out;
    archive.save_to(out);
    s.values[""] = out.str();
  }
  s.lrs.clear();
  for (const auto& group : optimizer_.param_groups()) s.lrs.push_back(group.options().get_lr());
}

void ElasticState::put(const Snapshot& s) {
  torch::NoGradGuard no_grad;
  serial_ = s.serial;
  put_kept(s);
  if (shards_) return;  // the model and the optimizer are the shards'
  const std::vector<at::Tensor> tensors = model_tensors(model_);
  COHORT_CHECK_EQ(tensors.size(), s.model.size()) << "the elastic commit is of another model";
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(s.model[i]);
  if (per_element_) {
    const std::vector<at::Tensor> params = optimizer_parameters(optimizer_);
    COHORT_CHECK_EQ(params.size(), s.states.size()) << "the elastic commit is of another optimizer";
    for (size_t i = 0; i < params.size(); ++i) {
      if (!s.states[i]) {
        erase_element_state(optimizer_, params[i]);
        continue;
      }
      // The optimizer updates its state in place: it gets copies.
      ElementState state = *s.states[i];
      for (auto& field : state.fields)
        if (field.second.defined()) field.second = field.second.clone();
      set_element_state(optimizer_, params[i], state);
    }
  } else {
    std::istringstream in(s.values.at(""));
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    load_optimizer(optimizer_, archive);
  }
  auto& groups = optimizer_.param_groups();
  COHORT_CHECK_EQ(groups.size(), s.lrs.size()) << "the elastic commit is of another optimizer";
  const double scale = scale_lr_ ? double(members()) / double(s.world) : 1.0;
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(s.lrs[g] * scale);
}

void ElasticState::put_kept(const Snapshot& s) {
  for (auto& [name, value] : counters_) {
    const auto it = s.counters.find(name);
    COHORT_CHECK_AS(ConfigError, it != s.counters.end())
        << "the elastic commit has no counter '" << name << "' (members keep different state)";
    value = it->second;
  }
  for (auto& [name, tensor] : tracked_) {
    const auto it = s.tracked.find(name);
    COHORT_CHECK_AS(ConfigError, it != s.tracked.end())
        << "the elastic commit has no tensor '" << name << "' (members keep different state)";
    tensor.copy_(it->second);
  }
  for (auto& [name, value] : values_) {
    const auto it = s.values.find(name);
    COHORT_CHECK_AS(ConfigError, it != s.values.end())
        << "the elastic commit has no value '" << name << "' (members keep different state)";
    value.load(it->second);
  }
  zero_pending();
}

void ElasticState::commit() {
  // One float64 sum: [membership changed, every tally's pending values].
  // Every member must leave the loop at the same commit, so they agree on
  // rank 0's look at the store (one read a step, not one per member). A
  // lost member throws here, before anything is committed.
  const GroupScope scope(group());
  std::vector<at::Tensor> parts{at::zeros({1}, at::kDouble)};
  const bool together = initialized() && elastic();
  if (together && member_rank() == 0 && membership_changed()) parts[0].fill_(1.0);
  for (const auto& [name, t] : tallies_) parts.push_back(t.pending.reshape({-1}));
  at::Tensor sums = at::cat(parts);
  if (together) sums = allreduce(sums, {.op = ReduceOp::sum});
  int64_t at_ = 1;
  for (auto& [name, t] : tallies_) {
    t.total.add_(sums.narrow(0, at_, t.total.numel()).view(t.total.sizes()));
    at_ += t.total.numel();
  }
  zero_pending();
  ++serial_;
  if (shards_) {
    // The parts first: a member lost meanwhile leaves this member's commit
    // before in force, with its parts (kept with the one before it).
    shards_->commit(serial_);
    std::swap(previous_, commit_);
  }
  if (!commit_) commit_ = std::make_unique<Snapshot>();
  take(*commit_);
  if (sums[0].item<double>() > 0)
    throw MembershipChanged("the job's membership changed after epoch " + std::to_string(membership_epoch()));
}

void ElasticState::restore() {
  if (commit_) put(*commit_);  // zeros the pending tallies too
  else zero_pending();
}

// Root's commit, tensor by tensor (same model: same shapes), after a header
// saying which optimizer state exists. Received into a new snapshot that
// replaces this member's commit only once complete: a root lost mid-way
// leaves every member its own commit, intact.
void ElasticState::receive(int root) {
  const bool mine = member_rank() == root;
  const Snapshot& own = *commit_;
  // Header: serial, world, then per optimizer parameter its step (-1: no state)
  // and which of its fields are defined; counters in name order.
  std::vector<int64_t> header{own.serial, own.world, int64_t(own.states.size()), int64_t(own.counters.size())};
  for (const auto& state : own.states) {
    header.push_back(state ? state->step : -1);
    for (size_t f = 0; state && f < state->fields.size(); ++f) header.push_back(state->fields[f].second.defined());
  }
  for (const auto& [name, value] : own.counters) header.push_back(value);
  at::Tensor length = broadcast(at::tensor({int64_t(header.size())}, at::kLong), {.root = root});
  at::Tensor head = mine ? at::tensor(header, at::kLong) : at::empty({length.item<int64_t>()}, at::kLong);
  head = broadcast(head, {.root = root});
  // The root sends its own commit, unchanged; the others build the one
  // they receive into.
  auto in = std::make_unique<Snapshot>();
  Snapshot& s = mine ? *commit_ : *in;
  if (!mine) {
    const int64_t* h = head.data_ptr<int64_t>();
    size_t at_ = 0;
    in->serial = h[at_++];
    in->world = h[at_++];
    const size_t states = size_t(h[at_++]), counters = size_t(h[at_++]);
    COHORT_CHECK_EQ(counters, own.counters.size()) << "members keep different counters";
    if (per_element_ && !shards_) {
      const std::vector<at::Tensor> params = optimizer_parameters(optimizer_);
      const std::vector<std::string> fields = element_state_fields(optimizer_);
      COHORT_CHECK_EQ(states, params.size()) << "members' optimizers differ";
      in->states.resize(states);
      for (size_t i = 0; i < states; ++i) {
        const int64_t step = h[at_++];
        if (step < 0) continue;
        in->states[i] = ElementState{.step = step, .fields = {}};
        for (size_t f = 0; f < fields.size(); ++f)
          in->states[i]->fields.emplace_back(fields[f], h[at_++] != 0 ? at::empty_like(params[i]) : at::Tensor());
      }
    }
    in->counters = own.counters;
    for (const auto& [name, bytes] : own.values) in->values[name];
    in->lrs.resize(own.lrs.size());
    for (auto& [name, value] : in->counters) value = h[at_++];
    for (const at::Tensor& t : own.model) in->model.push_back(at::empty_like(t));
    for (const auto& [name, tensor] : own.tracked) in->tracked[name] = at::empty_like(tensor);
  }
  for (at::Tensor& t : s.model) broadcast_(t, {.root = root});
  for (auto& state : s.states)
    for (size_t f = 0; state && f < state->fields.size(); ++f)
      if (state->fields[f].second.defined()) broadcast_(state->fields[f].second, {.root = root});
  // Values (and other optimizers' archives) in name order, the same names
  // on every member: their lengths, then their bytes in one broadcast.
  std::vector<int64_t> lengths;
  for (const auto& [name, bytes] : own.values) lengths.push_back(int64_t(bytes.size()));
  if (!lengths.empty()) {
    at::Tensor sizes = broadcast(at::tensor(lengths, at::kLong), {.root = root});
    const int64_t total = sizes.sum().item<int64_t>();
    at::Tensor bytes = at::empty({total}, at::kByte);
    char* out = static_cast<char*>(bytes.data_ptr());
    if (mine)
      for (const auto& [name, value] : own.values) out = std::copy(value.begin(), value.end(), out);
    bytes = broadcast(bytes, {.root = root});
    const char* in_bytes = static_cast<const char*>(bytes.data_ptr());
    size_t i = 0;
    for (auto& [name, value] : s.values) {
      const int64_t n = sizes[int64_t(i++)].item<int64_t>();
      if (!mine) value.assign(in_bytes, size_t(n));
      in_bytes += n;
    }
  }
  if (!shards_) {
    at::Tensor lrs = broadcast(at::tensor(own.lrs, at::kDouble), {.root = root});
    s.lrs.assign(lrs.data_ptr<double>(), lrs.data_ptr<double>() + lrs.numel());
  }
  for (auto& [name, tensor] : s.tracked) broadcast_(tensor, {.root = root});
  if (!mine) commit_ = std::move(in);
}

void ElasticState::sync() {
  const GroupScope scope(group());
  if (!commit_) {
    commit_ = std::make_unique<Snapshot>();
    take(*commit_);
  }
  if (shards_) return sync_sharded();
  if (members() > 1) {
    // The newest commit any member holds (the lowest rank's among equals).
    // Members that all hold the same committed step keep their own (the
    // state is replicated); before any commit, rank 0's state is everyone's
    // (processes may have started their models differently).
    receive_from_largest(commit_->serial, /*always=*/commit_->serial == 0);
  }
  put(*commit_);
  if (initialized() && elastic()) finish_joining();
}

int64_t ElasticState::receive_from_largest(int64_t key, bool always) {
  const at::Tensor keys = allgather(at::tensor({key}, at::kLong));
  if ((keys != keys.max()).any().item<bool>() || always) receive(static_cast<int>(keys.argmax().item<int64_t>()));
  return keys.max().item<int64_t>();
}

void ElasticState::sync_sharded() {
  // The parts: the newest commit the members hold together, in this
  // world's layout now (or the state as it is, kept as this member's
  // serial, when nobody holds a commit).
  const int64_t serial = shards_->restore(serial_);
  // The rest of that commit, from the lowest rank that holds it (a member
  // may hold it as the commit before its newest, or not at all: a new one).
  if (previous_ && previous_->serial == serial && commit_->serial != serial) std::swap(previous_, commit_);
  if (members() > 1) {
    const int64_t holders = receive_from_largest(commit_->serial == serial ? 1 : 0, /*always=*/serial == 0);
    COHORT_CHECK(holders == 1) << "elastic: no member holds the rest of commit " << serial
                               << " (members keep different state)";
  }
  put(*commit_);
  serial_ = serial;
  commit_->serial = serial;
  // Only now: a member lost above leaves the next sync to choose again,
  // maybe the commit before.
  previous_.reset();
  if (initialized() && elastic()) finish_joining();
}

bool run_elastic(ElasticState& state, const std::function<void()>& train, const std::function<void()>& rejoin) {
  // The rejoin after a new world is formed makes collectives too: a member
  // lost during it is recovered from like one lost in training.
  bool rejoining = false;
  for (;;) {
    try {
      if (rejoining && rejoin) rejoin();
      rejoining = false;
      state.sync();
      train();
      return true;
    } catch (const MembershipChanged& e) {
      COHORT_LOG(info) << "elastic: " << e.what() << "; forming the new world";
      if (!reform_or_leave()) return false;
    } catch (const PeerLostError& e) {
      if (!initialized() || !elastic()) throw;
      COHORT_LOG(warn) << "elastic: " << e.what() << "; forming a new world from the last commit";
      if (!reform_or_leave()) return false;
      // No restore() here: the sync() before training goes on puts the
      // newest commit any member holds (this one's or another's) into the
      // live state, and putting this member's first would copy the model
      // and its optimizer state twice.
    }
    rejoining = true;
    COHORT_LOG(info) << "elastic: epoch " << membership_epoch() << ", rank " << rank() << " of " << size();
  }
}

}  // namespace cohort
