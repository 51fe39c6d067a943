#include "cohort/torch/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/checkpoint/checkpoint_file.h"
#include "cohort/torch/checkpoint/checkpoint_frame.h"
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/core/optimizer_archive.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace {

constexpr int64_t kStateFormat = 1;

std::string errno_text() { return std::strerror(errno); }

std::vector<char> serialize(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                            const TrainingState& state) {
  torch::serialize::OutputArchive archive, model, optim;
  module.save(model);
  save_optimizer(optimizer, optim);
  archive.write("model", model);
  archive.write("optimizer", optim);
  save_training_state(archive, state);
  return archive_bytes(archive);
}

std::string damaged(const std::string& path) {
  return "checkpoint " + path + " is unusable (the previous one, if any, is " + previous_checkpoint_path(path) + ")";
}

TrainingState state_from(const at::Tensor& t, const std::string& path) {
  COHORT_CHECK_AS(ConfigError, t.scalar_type() == at::kLong && t.dim() == 1 && t.numel() == 5 &&
                                   t.data_ptr<int64_t>()[0] == kStateFormat)
      << damaged(path) << ": unexpected training_state record";
  const int64_t* v = t.data_ptr<int64_t>();
  TrainingState s;
  s.epoch = v[1];
  s.batch = v[2];
  s.step = v[3];
  std::memcpy(&s.seed, &v[4], sizeof s.seed);
  return s;
}

}  // namespace

std::string previous_checkpoint_path(const std::string& path) { return path + ".prev"; }

void save_training_state(torch::serialize::OutputArchive& archive, const TrainingState& state) {
  int64_t seed_bits;
  std::memcpy(&seed_bits, &state.seed, sizeof seed_bits);
  archive.write("training_state",
                at::tensor(std::vector<int64_t>{kStateFormat, state.epoch, state.batch, state.step, seed_bits},
                           at::TensorOptions().dtype(at::kLong)));
}

std::vector<char> archive_bytes(torch::serialize::OutputArchive& archive) {
  std::vector<char> bytes;
  archive.save_to([&bytes](const void* data, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  return bytes;
}

std::vector<char> read_checkpoint_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  COHORT_CHECK_AS(ConfigError, fd >= 0) << "cannot open checkpoint " << path << ": " << errno_text();
  std::vector<char> file;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buffer, sizeof buffer);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      COHORT_CHECK_AS(ConfigError, r == 0) << "reading checkpoint " << path << ": " << errno_text();
      break;
    }
    file.insert(file.end(), buffer, buffer + r);
  }
  return checkpoint_payload(std::move(file), damaged(path));
}


void write_checkpoint_file(const std::string& path, const std::vector<char>& payload,
                           const CheckpointOptions& options) {
  CheckpointFileWriter writer(path, CheckpointKind::archive);
  writer.append(payload.data(), payload.size());
  writer.commit(options);
}

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingState& state,
                     const CheckpointOptions& options) {
  write_checkpoint_file(path, serialize(module, optimizer, state), options);
}

void verify_checkpoint(const std::string& path) { (void)read_checkpoint_file(path); }

TrainingState load_checkpoint(const std::string& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer) {
  const std::vector<char> payload = read_checkpoint_file(path);
  torch::serialize::InputArchive archive, model, optim;
  at::Tensor state;
  try {
    archive.load_from(payload.data(), payload.size());
    archive.read("model", model);
    archive.read("optimizer", optim);
    archive.read("training_state", state);
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << damaged(path) << ": unreadable archive: " << e.what_without_backtrace();
  }
  const TrainingState result = state_from(state, path);
  check_module_state(module, model, "checkpoint " + path);
  try {
    // The optimizer first: it can still refuse (another optimizer kind or
    // parameter layout), and the model must stay untouched if it does.
    load_optimizer(optimizer, optim);
  } catch (const MismatchError& e) {
    COHORT_THROW(ConfigError) << "checkpoint " << path << " does not fit the optimizer: " << e.what();
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << "checkpoint " << path
                              << " does not fit the optimizer: " << e.what_without_backtrace();
  }
  // In place: Module::load() would give the parameters new gradient
  // accumulators and silently detach DDP's and DistributedOptimizer's hooks.
  load_module_state(module, model, "checkpoint " + path);
  return result;
}

std::optional<TrainingState> resume_from_checkpoint(const std::string& path, torch::nn::Module& module,
                                                    torch::optim::Optimizer& optimizer,
                                                    const ResumeOptions& options) {
  engine::Engine& eng = resolve_engine(options.engine);
  // status: 0 loaded, 1 nothing to resume from, 2 failed (message follows).
  std::array<int64_t, 6> record{};
  std::string message;
  std::exception_ptr root_error;
  if (eng.rank() == options.root) {
    const std::string prev = previous_checkpoint_path(path);
    struct stat st;
    const bool have = ::stat(path.c_str(), &st) == 0;
    const bool have_prev = ::stat(prev.c_str(), &st) == 0;
    if (!have && !(options.fall_back_to_previous && have_prev)) {
      record[0] = 1;
    } else {
      try {
        TrainingState s;
        try {
          if (!have) COHORT_THROW(ConfigError) << "checkpoint " << path << " does not exist";
          s = load_checkpoint(path, module, optimizer);
        } catch (const ConfigError& e) {
          if (!options.fall_back_to_previous || !have_prev) throw;
          COHORT_LOG(warn) << e.what() << "; resuming from " << prev;
          s = load_checkpoint(prev, module, optimizer);
        }
        int64_t seed_bits;
        std::memcpy(&seed_bits, &s.seed, sizeof seed_bits);
        record = {0, s.epoch, s.batch, s.step, seed_bits, 0};
      } catch (const std::exception& e) {
        root_error = std::current_exception();
        message = e.what();
        record[0] = 2;
      }
    }
    record[5] = static_cast<int64_t>(message.size());
  }
  engine::BroadcastOptions o;
  eng.broadcast_async("resume/record", BufferView{record.data(), record.size(), DType::i64}, options.root, o).wait();
  if (record[0] == 2) {
    message.resize(size_t(record[5]));
    eng.broadcast_async("resume/message", BufferView{message.data(), message.size(), DType::u8}, options.root, o)
        .wait();
    if (root_error) std::rethrow_exception(root_error);
    COHORT_THROW(ConfigError) << "rank " << options.root << " could not resume from " << path << ": " << message;
  }
  if (record[0] == 1) return std::nullopt;
  broadcast_parameters(module, options.root, &eng);
  broadcast_optimizer_state(optimizer, options.root, &eng);
  TrainingState s;
  s.epoch = record[1];
  s.batch = record[2];
  s.step = record[3];
  std::memcpy(&s.seed, &record[4], sizeof s.seed);
  return s;
}

}  // namespace cohort
