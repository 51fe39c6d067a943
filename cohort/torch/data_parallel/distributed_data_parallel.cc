#include "cohort/torch/data_parallel/distributed_data_parallel.h"

#include <torch/torch.h>

#include <cstring>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/data_parallel/replica_agreement.h"

namespace cohort {
namespace {

// One line per tensor: "<kind> <name> <dtype> <shape>".
std::vector<std::string> model_table(torch::nn::Module& module) {
  std::vector<std::string> lines;
  auto add = [&](const char* kind, const std::string& name, const at::Tensor& t) {
    std::ostringstream os;
    os << kind << ' ' << name << ' ' << t.scalar_type() << ' ' << t.sizes();
    lines.push_back(os.str());
  };
  for (const auto& item : module.named_parameters()) add("parameter", item.key(), item.value());
  for (const auto& item : module.named_buffers()) add("buffer", item.key(), item.value());
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// "parameter fc2.weight Float [4, 8]" -> "parameter fc2.weight"
std::string tensor_of(const std::string& line) {
  auto second = line.find(' ', line.find(' ') + 1);
  return line.substr(0, second);
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(torch::nn::Module& module,
                                                         DistributedDataParallelOptions options)
    : module_(module),
      options_(std::move(options)),
      engine_(options_.engine, "DistributedDataParallel"),
      check_interval_(agreement_check_interval(options_.agreement_check_steps)) {
  check_same_model();
  if (options_.init_sync) broadcast_parameters(module_, 0, engine_.get());
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (const auto& item : module_.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
  // Whether the bucket cap is tuned: rank 0's word for everyone, since the
  // tuning adds a collective to each step while it lasts. Not under a hook
  // whose per-bucket state every rebuild would reset (PowerSGD's).
  bool tune_buckets = false;
  if (engine_.size() > 1) {
    const bool tunable = !options_.comm_hook || !options_.comm_hook->keeps_bucket_state();
    at::Tensor flag =
        at::tensor({int64_t(options_.autotune_bucket_bytes && tunable && engine().autotunes())}, at::kLong);
    broadcast_(flag, {.root = 0, .engine = engine_.get()});
    tune_buckets = flag.item<int64_t>() != 0;
  }
  reducer_ = std::make_unique<Reducer>(std::move(names), std::move(params),
                                       ReducerOptions{.first_bucket_bytes = options_.first_bucket_bytes,
                                                      .bucket_bytes = options_.bucket_bytes,
                                                      .find_unused_parameters = options_.find_unused_parameters,
                                                      .gradient_as_bucket_view = options_.gradient_as_bucket_view,
                                                      .comm_hook = options_.comm_hook,
                                                      .engine = engine_.get(),
                                                      .autotune_bucket_bytes = tune_buckets});
}

DistributedDataParallelBase::~DistributedDataParallelBase() = default;

void DistributedDataParallelBase::check_same_model() {
  const int size = engine_.size();
  if (size == 1) return;
  std::string mine;
  for (const auto& line : model_table(module_)) mine += line + "\n";
  // Lengths first, then the tables padded to the longest: one row per rank.
  at::Tensor length = at::tensor({int64_t(mine.size())}, at::kLong);
  at::Tensor lengths = allgather(length, {.engine = engine_.get()});
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor row = at::zeros({1, longest}, at::kByte);
  std::memcpy(row.data_ptr(), mine.data(), mine.size());
  at::Tensor rows = allgather(row, {.engine = engine_.get()});
  std::vector<std::vector<std::string>> tables;
  for (int r = 0; r < size; ++r) {
    const auto* data = static_cast<const char*>(rows[r].data_ptr());
    tables.push_back(split_lines(std::string(data, size_t(lengths[r].item<int64_t>()))));
  }
  const auto& ref = tables[0];
  for (int r = 1; r < size; ++r) {
    const auto& t = tables[size_t(r)];
    for (size_t k = 0; k < std::max(ref.size(), t.size()); ++k) {
      if (k < ref.size() && k < t.size() && ref[k] == t[k]) continue;
      std::ostringstream os;
      os << "DistributedDataParallel: the model on rank " << r << " differs from rank 0's: ";
      if (k >= t.size())
        os << ref[k] << " on rank 0 is missing on rank " << r << " (rank 0 has " << ref.size()
           << " tensors, rank " << r << ' ' << t.size() << ')';
      else if (k >= ref.size())
        os << t[k] << " on rank " << r << " is missing on rank 0 (rank 0 has " << ref.size() << " tensors, rank "
           << r << ' ' << t.size() << ')';
      else if (tensor_of(ref[k]) == tensor_of(t[k]))
        os << tensor_of(ref[k]) << " is " << ref[k].substr(tensor_of(ref[k]).size() + 1) << " on rank 0 but "
           << t[k].substr(tensor_of(t[k]).size() + 1) << " on rank " << r;
      else
        os << "tensor " << k << " is " << ref[k] << " on rank 0 but " << t[k] << " on rank " << r;
      COHORT_THROW(MismatchError) << os.str();
    }
  }
}

void DistributedDataParallelBase::broadcast_buffers() {
  if (!options_.broadcast_buffers || engine_.size() == 1) return;
  std::vector<TensorHandle> handles;
  engine::Engine* engine = engine_.get();
  for (const auto& b : module_.buffers()) handles.push_back(broadcast_async_(b, {.root = 0, .engine = engine}));
  for (auto& h : handles) h.wait();
}

void DistributedDataParallelBase::pre_forward() {
  const bool training_step = torch::GradMode::is_enabled();
  const int64_t step = training_steps_ + (training_step ? 1 : 0);
  try {
    reducer_->prepare_for_forward();
    torch::NoGradGuard no_grad;
    // Before this step's forward, the parameters are as the previous step
    // left them: equal on every rank.
    if (training_step && agreement_check_due(step, check_interval_)) check_agreement_now(step);
    broadcast_buffers();
  } catch (...) {
    std::rethrow_exception(
        step_count_error(std::current_exception(), "DistributedDataParallel", engine_.rank(), step));
  }
  training_steps_ = step;
}

void DistributedDataParallelBase::check_agreement_now(int64_t step) {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (const auto& item : module_.named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  const AgreementCheck check = start_agreement_check(*engine_.lock(), "", params, step);
  check.handle.wait();
  check_agreement(check, "DistributedDataParallel", names);
}

void DistributedDataParallelBase::post_forward(const std::vector<at::Tensor>& outputs) {
  if (!options_.find_unused_parameters || !torch::GradMode::is_enabled() || !reducer_->require_sync()) return;
  COHORT_CHECK_AS(ConfigError, !outputs.empty())
      << "DistributedDataParallel: find_unused_parameters needs a forward that returns a tensor or a "
         "std::vector<at::Tensor> (the graph is traversed from them)";
  reducer_->prepare_for_backward(outputs);
}

DistributedDataParallelBase::NoSyncGuard::NoSyncGuard(Reducer& reducer)
    : reducer_(reducer), previous_(reducer.require_sync()) {
  reducer_.set_require_sync(false);
}

DistributedDataParallelBase::NoSyncGuard::~NoSyncGuard() { reducer_.set_require_sync(previous_); }

}  // namespace cohort
