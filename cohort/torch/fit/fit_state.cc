// The saved state of a fit (Model::save_fit_state() / load_fit_state()):
// what BackupAndRestore writes and a resumed run reads, and what an elastic
// fit commits of its progress. An archive of
//   strategy        the strategy's save() (or the name of its sharded save)
//   epoch_metrics   the epoch's metric sums so far, over every process
//   position        [epoch, batch, step]
//   history         the History as a callback state
//   callbacks/NAME  each callback's state (CallbackList::save_states())
//   stream          the training stream's state (an input pipeline's cursor)
//   rng             every process's LibTorch generator state, in process order
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <mutex>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

at::Tensor bytes_tensor(const std::string& bytes) {
  return at::tensor(std::vector<uint8_t>(bytes.begin(), bytes.end()), at::kByte);
}

std::string tensor_bytes(at::Tensor t) {
  t = t.to(at::kByte).contiguous();
  return std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), size_t(t.numel()));
}

void write_state(torch::serialize::OutputArchive& archive, const std::string& key, const CallbackState& state) {
  torch::serialize::OutputArchive sub;
  for (const auto& [name, values] : state) sub.write(name, at::tensor(values, at::kDouble));
  archive.write(key, sub);
}

CallbackState read_state(torch::serialize::InputArchive& archive, const std::string& key) {
  CallbackState state;
  torch::serialize::InputArchive sub;
  if (!archive.try_read(key, sub)) return state;
  for (const std::string& name : sub.keys()) {
    at::Tensor t;
    sub.read(name, t);
    t = t.to(at::kDouble).contiguous();
    state[name] = std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  return state;
}

}  // namespace

void Model::save_fit_state(torch::serialize::OutputArchive& archive, const std::string& shards) {
  torch::serialize::OutputArchive strategy;
  ShardedCheckpoints* sharded = strategy_.sharded_checkpoints();
  if (sharded && sharded->saves_sharded() && !shards.empty()) {
    // The small archive names the sharded save it goes with: written after
    // it, it never names a save that is not complete.
    strategy.write("sharded_save", bytes_tensor(sharded->save_sharded(shards)));
  } else {
    strategy_.save(strategy);
  }
  archive.write("strategy", strategy);
  // The epoch's metric states so far, merged over the processes (each holds
  // only its rows'; an elastic fit's committed sums are everyone's already);
  // on resume the chief takes them and the others start from zero, so the
  // epoch's merged metrics come out as if never stopped, at any number of
  // processes.
  at::Tensor metrics = strategy_.all_sum(epoch_metrics_.defined() ? epoch_metrics_ : metrics_.zeros());
  if (committed_metrics_.defined()) metrics = metrics + committed_metrics_;
  archive.write("epoch_metrics", metrics);
  write_progress(archive);
  // Each process's generator: ranks draw different amounts (dropout over
  // rows of uneven shares), so their states differ.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor mine;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    mine = generator.get_state();
  }
  archive.write("rng", strategy_.all_gather(mine.unsqueeze(0)));
}

void Model::write_progress(torch::serialize::OutputArchive& archive) const {
  archive.write("position", at::tensor({position_.epoch, position_.batch, position_.step}, at::kLong));
  CallbackState history;
  history_.save(history);
  write_state(archive, "history", history);
  torch::serialize::OutputArchive callbacks;
  for (const auto& [name, state] : callbacks_.save_states()) write_state(callbacks, name, state);
  archive.write("callbacks", callbacks);
  // The stream's own position (an input pipeline's cursor), as bytes.
  const std::string stream = stream_ ? stream_->state() : std::string();
  if (!stream.empty()) archive.write("stream", bytes_tensor(stream));
}

void Model::load_fit_state(torch::serialize::InputArchive& archive, const std::string& shards) {
  at::Tensor metrics, rng;
  torch::serialize::InputArchive strategy;
  try {
    archive.read("strategy", strategy);
    archive.read("epoch_metrics", metrics);
    archive.read("rng", rng);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "not a saved fit state: " << e.what_without_backtrace();
  }
  COHORT_CHECK_AS(ConfigError, metrics.numel() == metrics_.size())
      << "saved fit state: its metric states (" << metrics.numel() << " values) do not fit this model's metrics ("
      << metrics_.size() << " values): were the metrics changed?";
  const Progress progress = parse_progress(archive);
  at::Tensor sharded_save;
  if (strategy.try_read("sharded_save", sharded_save)) {
    COHORT_CHECK_AS(ConfigError, !shards.empty())
        << "saved fit state: the strategy's state is in a sharded checkpoint, and no directory was given";
    ShardedCheckpoints* sharded = strategy_.sharded_checkpoints();
    COHORT_CHECK_AS(ConfigError, sharded != nullptr)
        << "saved fit state: the strategy's state is in a sharded checkpoint (" << shards << "), which "
        << strategy_.spec() << " cannot read: resume with the strategy that saved it, or with multi_worker";
    sharded->load_sharded(shards, tensor_bytes(sharded_save));
  } else {
    strategy_.load(strategy);
  }
  put_progress(progress);
  // As MetricStates makes them: float64 on the CPU, contiguous.
  const at::Tensor saved = metrics.to(at::kCPU, at::kDouble).contiguous();
  resumed_epoch_metrics_ = strategy_.is_chief() ? saved.clone() : at::zeros_like(saved);
  resumed_ = true;
  // This process's generator, when the saved run had as many processes;
  // otherwise (a resume at another world size) the chief's, the only
  // state every process can take.
  const int64_t row = rng.dim() == 2 && rng.size(0) == strategy_.process_count() ? strategy_.process_index() : 0;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng.dim() == 2 ? rng[row].contiguous() : rng);
}

Model::Progress Model::parse_progress(torch::serialize::InputArchive& archive) const {
  Progress p;
  at::Tensor position, stream;
  torch::serialize::InputArchive callbacks;
  try {
    archive.read("position", position);
    archive.read("callbacks", callbacks);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "not a saved fit state: " << e.what_without_backtrace();
  }
  COHORT_CHECK_AS(ConfigError, position.numel() == 3 && position.scalar_type() == at::kLong)
      << "saved fit state: bad position record";
  const int64_t* at_ = position.data_ptr<int64_t>();
  p.epoch = at_[0];
  p.batch = at_[1];
  p.step = at_[2];
  p.history = read_state(archive, "history");
  for (const std::string& name : callbacks.keys()) p.callbacks[name] = read_state(callbacks, name);
  if (archive.try_read("stream", stream)) p.stream = tensor_bytes(stream);
  return p;
}

void Model::put_progress(const Progress& p) {
  position_.epoch = p.epoch;
  position_.batch = p.batch;
  position_.step = p.step;
  history_.load(p.history);
  callbacks_.load_states(p.callbacks);
  resumed_stream_state_ = p.stream;
}

std::string Model::elastic_progress() const {
  torch::serialize::OutputArchive archive;
  write_progress(archive);
  archive.write("stopped", at::tensor(int64_t(stopped_)));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void Model::load_elastic_progress(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  put_progress(parse_progress(archive));
  at::Tensor stopped;
  archive.read("stopped", stopped);
  stopped_ = stopped.item<int64_t>() != 0;
}

}  // namespace cohort
