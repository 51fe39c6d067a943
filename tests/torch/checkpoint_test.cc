// Checkpoints: round trip, resuming a run mid-epoch gives bitwise the same
// result as never stopping, every kind of damage is rejected with a clear
// error while the previous checkpoint stays usable, a checkpoint of another
// model is refused before anything changes, and the distributed resume.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::checkpoint_test {
namespace {

namespace nn = torch::nn;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/cohort_checkpoint_test.XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

nn::Sequential make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
}

// A tiny data set; the sampler picks batches from it as the example does.
constexpr int64_t kExamples = 40, kBatch = 8;
const at::Tensor& inputs() {
  static const at::Tensor x = at::randn({kExamples, 4}, at::make_generator<at::CPUGeneratorImpl>(3));
  return x;
}

struct TrainingRun {
  nn::Sequential net;
  std::unique_ptr<torch::optim::Adam> opt;
  cohort::TrainingState state;
  explicit TrainingRun(uint64_t seed)
      : net(make_net(seed)), opt(std::make_unique<torch::optim::Adam>(net->parameters(), 0.01)) {}

  // Trains `batches` batches from where `state` says, as a training loop would.
  void train(int64_t batches) {
    cohort::DistributedSampler sampler({.dataset_size = kExamples, .num_replicas = 1, .rank = 0, .seed = state.seed});
    const int64_t per_epoch = kExamples / kBatch;
    for (int64_t i = 0; i < batches; ++i) {
      sampler.set_epoch(state.epoch);
      const auto order = sampler.indices();
      std::vector<int64_t> idx(order.begin() + state.batch * kBatch, order.begin() + (state.batch + 1) * kBatch);
      const at::Tensor x = inputs().index_select(0, at::tensor(idx));
      opt->zero_grad();
      net->forward(x).pow(2).mean().backward();
      opt->step();
      ++state.step;
      if (++state.batch == per_epoch) state.batch = 0, ++state.epoch;
    }
  }
};

TEST(Checkpoint, ResumingMidEpochContinuesTheSameRun) {
  torch::set_num_threads(1);
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun straight(1);
  straight.state.seed = 99;
  straight.train(13);

  TrainingRun first(1);
  first.state.seed = 99;
  first.train(7);  // stops in the middle of epoch 1
  cohort::save_checkpoint(path, *first.net, *first.opt, first.state);

  TrainingRun resumed(12345);  // a fresh process: other initial weights, empty optimizer
  resumed.state = cohort::load_checkpoint(path, *resumed.net, *resumed.opt);
  EXPECT_EQ(resumed.state, first.state);
  EXPECT_TRUE(bitwise_equal(copy_parameters(*resumed.net), copy_parameters(*first.net)));
  resumed.train(6);
  EXPECT_EQ(resumed.state, straight.state);
  EXPECT_TRUE(bitwise_equal(copy_parameters(*resumed.net), copy_parameters(*straight.net)))
      << "Adam's moments and step count, or the sampler position, were not restored";
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string load_error(const std::string& path, nn::Sequential& net, torch::optim::Optimizer& opt) {
  try {
    cohort::load_checkpoint(path, *net, opt);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Checkpoint, DamageIsRejectedAndThePreviousStaysUsable) {
  torch::set_num_threads(1);
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun a(1);
  a.train(2);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);
  const auto params_a = copy_parameters(*a.net);
  a.train(2);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);  // the first becomes ck.prev
  EXPECT_TRUE(fs::exists(cohort::previous_checkpoint_path(path)));
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid()))) << "temporary file left behind";
  const std::vector<char> good = read_bytes(path);
  ASSERT_GT(good.size(), 64u);

  struct Damage {
    std::string name;
    std::function<std::vector<char>(std::vector<char>)> apply;
    std::string message;
  };
  const std::vector<Damage> damages = {
      {"empty", [](auto) { return std::vector<char>(); }, "truncated: 0 bytes"},
      {"header cut", [](auto b) { b.resize(20); return b; }, "shorter than the 32-byte header"},
      {"payload cut", [](auto b) { b.resize(b.size() / 2); return b; }, "truncated: the header announces"},
      {"last byte cut", [](auto b) { b.pop_back(); return b; }, "truncated"},
      {"payload bit flip", [](auto b) { b[b.size() / 2] ^= 0x10; return b; }, "corrupt payload (checksum mismatch)"},
      {"header bit flip", [](auto b) { b[17] ^= 0x01; return b; }, "corrupt header (checksum mismatch)"},
      {"bad magic", [](auto b) { b[0] = 'X'; return b; }, "not a cohort checkpoint (bad magic)"},
      {"trailing bytes", [](auto b) { b.push_back('!'); return b; }, "1 unexpected bytes after the payload"},
  };
  for (const Damage& d : damages) {
    write_bytes(path, d.apply(good));
    TrainingRun victim(5);
    const auto before = copy_parameters(*victim.net);
    const std::string error = load_error(path, victim.net, *victim.opt);
    EXPECT_NE(error.find(d.message), std::string::npos) << d.name << ": " << error;
    EXPECT_NE(error.find(cohort::previous_checkpoint_path(path)), std::string::npos)
        << d.name << ": the error should name the previous checkpoint: " << error;
    EXPECT_TRUE(bitwise_equal(copy_parameters(*victim.net), before)) << d.name << ": the model was modified";
  }
  TrainingRun back(5);
  const cohort::TrainingState s = cohort::load_checkpoint(cohort::previous_checkpoint_path(path), *back.net, *back.opt);
  EXPECT_EQ(s.step, 2);
  EXPECT_TRUE(bitwise_equal(copy_parameters(*back.net), params_a));

  EXPECT_NE(load_error(dir.file("missing"), back.net, *back.opt).find("cannot open checkpoint"), std::string::npos);
}

TEST(Checkpoint, AnotherModelIsRefusedBeforeAnythingChanges) {
  torch::set_num_threads(1);
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun a(1);
  a.train(1);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);
  nn::Sequential other = nn::Sequential(nn::Linear(4, 9), nn::ReLU(), nn::Linear(9, 3));
  torch::optim::Adam opt(other->parameters(), 0.01);
  const auto before = copy_parameters(*other);
  const std::string error = load_error(path, other, opt);
  EXPECT_NE(error.find("does not fit the model: '0.weight' is [8, 4]"), std::string::npos) << error;
  EXPECT_TRUE(bitwise_equal(copy_parameters(*other), before));
}

// Loading writes into the parameters in place: each keeps its autograd
// gradient accumulator, where DistributedDataParallel and
// DistributedOptimizer hook in. (LibTorch's Module::load() replaces them,
// which silently stopped DDP from reducing after a resume.)
TEST(Checkpoint, LoadingKeepsEveryParametersGradientAccumulator) {
  torch::set_num_threads(1);
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun a(1), b(2);
  a.train(2);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);
  // Held, as the hooks hold them (autograd keeps only a weak reference).
  std::vector<std::shared_ptr<torch::autograd::Node>> before;
  for (const auto& p : b.net->parameters()) before.push_back(torch::autograd::impl::grad_accumulator(p));
  cohort::load_checkpoint(path, *b.net, *b.opt);
  EXPECT_TRUE(bitwise_equal(copy_parameters(*b.net), copy_parameters(*a.net)));
  size_t i = 0;
  for (const auto& p : b.net->parameters())
    EXPECT_EQ(torch::autograd::impl::grad_accumulator(p), before[i++]) << "parameter " << i;
}

TEST(Checkpoint, DistributedResumeFromRootsFile) {
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun saved(1);
  saved.state.seed = 7;
  saved.train(3);
  cohort::save_checkpoint(path, *saved.net, *saved.opt, saved.state);
  const auto want = copy_parameters(*saved.net);

  PerRank<std::vector<at::Tensor>> got(3);
  std::vector<cohort::TrainingState> states(3);
  run_torch_ranks(3, [&](int rank, int) {
    nn::Sequential net = nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
    torch::optim::Adam opt(net->parameters(), 0.5);
    // Only root's path matters; the others name a file that does not exist.
    const auto s = cohort::resume_from_checkpoint(rank == 0 ? path : dir.file("nowhere"), *net, opt);
    COHORT_CHECK(s.has_value()) << "rank " << rank << " got no state";
    states[size_t(rank)] = *s;
    COHORT_CHECK(opt.param_groups()[0].options().get_lr() == 0.01) << "lr not restored on rank " << rank;
    got.add(rank, copy_parameters(*net));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(states[size_t(r)], saved.state) << "rank " << r;
    EXPECT_TRUE(bitwise_equal(got.of(r)[0], want)) << "rank " << r;
  }
}

TEST(Checkpoint, DistributedResumeFallsBackAndReportsRootsFailure) {
  TempDir dir;
  const std::string path = dir.file("ck");
  TrainingRun a(1);
  a.train(1);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);
  a.train(1);
  cohort::save_checkpoint(path, *a.net, *a.opt, a.state);
  auto bytes = read_bytes(path);
  bytes.resize(40);
  write_bytes(path, bytes);

  // Damaged latest: everyone resumes from the previous one (step 1).
  std::vector<int64_t> steps(2, -1);
  run_torch_ranks(2, [&](int rank, int) {
    nn::Sequential net = make_net(3);
    torch::optim::Adam opt(net->parameters(), 0.01);
    steps[size_t(rank)] = cohort::resume_from_checkpoint(path, *net, opt)->step;
  });
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 1}));

  // Without a usable fallback every rank fails with root's reason.
  std::vector<std::string> errors(2);
  run_torch_ranks(2, [&](int rank, int) {
    nn::Sequential net = make_net(3);
    torch::optim::Adam opt(net->parameters(), 0.01);
    try {
      cohort::resume_from_checkpoint(path, *net, opt, {.fall_back_to_previous = false});
    } catch (const ConfigError& e) {
      errors[size_t(rank)] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("truncated"), std::string::npos) << "'" << e << "'";
  EXPECT_NE(errors[1].find("rank 0 could not resume"), std::string::npos) << errors[1];

  // Nothing to resume from: a fresh start on every rank.
  std::vector<int> fresh(2, 0);
  run_torch_ranks(2, [&](int rank, int) {
    nn::Sequential net = make_net(3);
    torch::optim::Adam opt(net->parameters(), 0.01);
    fresh[size_t(rank)] = !cohort::resume_from_checkpoint(dir.file("none"), *net, opt).has_value();
  });
  EXPECT_EQ(fresh, (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace cohort::testing::checkpoint_test
