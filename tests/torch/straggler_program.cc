// A fit() under cohortrun whose steps are made of sleeps, for the straggler
// tests (straggler_test.cc): every rank's model sleeps --base-ms in its
// forward (its compute); from step --slow-after on, --slow-rank sleeps
// --slow-ms more, in its compute (--slow compute) or in its input pipeline's
// next() (--slow input). The slow rank prints "slowdown begins" when it
// starts; at every epoch's end the chief prints each rank's accounting
// ("accounting rank R step_ms ... other_ms ...") and the epoch's
// slowest_rank logs.
//
//   straggler_program [--slow-rank R] [--slow compute|input] [--slow-ms 10] [--base-ms 10]
//                     [--slow-after 30] [--steps 300]
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cohort/common/flags.h"
#include "cohort/torch/data/dataset_stream.h"
#include "tests/torch/torch_programs.h"

namespace cohort::testing::straggler_program {

namespace {

struct Slowdown {
  int rank = -1;
  std::string where = "compute";
  int64_t ms = 10;
  int64_t base_ms = 10;
  int64_t after = 30;
  const int64_t* step = nullptr;  // fit()'s position: the steps done
  bool announced = false;

  bool active() {
    if (rank != cohort::rank() || *step < after) return false;
    if (!announced) {
      announced = true;
      std::printf("slowdown begins\n");
      std::fflush(stdout);
    }
    return true;
  }
  void sleep_ms(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
};

Slowdown slowdown;

struct SleepyImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) {
    slowdown.sleep_ms(slowdown.base_ms + (slowdown.where == "compute" && slowdown.active() ? slowdown.ms : 0));
    return x;
  }
};
TORCH_MODULE(Sleepy);

// The training input, slowed on one rank.
class SlowStream final : public cohort::BatchStream {
 public:
  explicit SlowStream(cohort::BatchStream& inner) : inner_(inner) {}
  int64_t size() const override { return inner_.size(); }
  int64_t start_epoch(const cohort::InputContext& c, int64_t e, int64_t done, const std::string& r) override {
    return inner_.start_epoch(c, e, done, r);
  }
  int64_t next_rows() const override { return inner_.next_rows(); }
  std::optional<int64_t> next_global_rows() const override { return inner_.next_global_rows(); }
  cohort::Batch next() override {
    if (slowdown.where == "input" && slowdown.active()) slowdown.sleep_ms(slowdown.ms);
    return inner_.next();
  }
  std::string state() const override { return inner_.state(); }

 private:
  cohort::BatchStream& inner_;
};

struct Report : cohort::Callback {
  std::string name() const override { return "report"; }
  void on_epoch_end(cohort::Model& model, int64_t epoch, const cohort::Logs& logs) override {
    if (!model.is_chief()) return;
    for (const auto& s : model.epoch_ranks())
      std::printf(
          "accounting rank %d steps %lld step_ms %.4f compute_ms %.4f peer_wait_ms %.4f transfer_ms %.4f "
          "input_ms %.4f other_ms %.4f\n",
          s.rank, static_cast<long long>(s.window_steps), s.step_ms, s.compute_ms, s.peer_wait_ms, s.transfer_ms,
          s.input_ms, s.other_ms);
    if (logs.count("slowest_rank"))
      std::printf("epoch %lld slowest_rank %d share %.4f\n", static_cast<long long>(epoch),
                  static_cast<int>(logs.at("slowest_rank")), logs.at("slowest_rank_share"));
    std::fflush(stdout);
  }
};

}  // namespace

// The program's main(): torch_programs.cc calls it when the binary is
// started as straggler_program.
int run(int argc, char** argv) {
  int64_t steps = 300;
  try {
    namespace flags = cohort::flags;
    flags::parse_flags(
        std::vector<std::string>(argv + 1, argv + argc),
        {{"--slow-rank", [&](auto& f, auto& v) { slowdown.rank = int(flags::parse_number<int64_t>(f, v, -1)); }},
         {"--slow", [&](auto&, auto& v) { slowdown.where = v; }},
         {"--slow-ms", [&](auto& f, auto& v) { slowdown.ms = flags::parse_number<int64_t>(f, v, 0); }},
         {"--base-ms", [&](auto& f, auto& v) { slowdown.base_ms = flags::parse_number<int64_t>(f, v, 0); }},
         {"--slow-after", [&](auto& f, auto& v) { slowdown.after = flags::parse_number<int64_t>(f, v, 0); }},
         {"--steps", [&](auto& f, auto& v) { steps = flags::parse_number<int64_t>(f, v, 1); }}},
        {});
    if (slowdown.where != "compute" && slowdown.where != "input")
      throw cohort::ConfigError("--slow must be compute or input, got '" + slowdown.where + "'");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "straggler_program: %s\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  }
  cohort::set_intra_op_threads(1);
  cohort::init();
  auto strategy = cohort::make_strategy("multi_worker");
  const int64_t batch = 6 * cohort::size();
  auto g = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({steps * batch, 8}, g);
  const at::Tensor y = (x.sum(1) > 0).to(torch::kInt64);
  torch::manual_seed(1);
  torch::nn::Sequential net(Sleepy(), torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 2));
  cohort::Model model(
      *strategy, net,
      {.loss = torch::nn::CrossEntropyLoss(), .optimizer = torch::optim::SGDOptions(0.1), .metrics = {}});
  const cohort::TensorDataset data(x, y);
  cohort::DatasetStream inner(data, /*shuffle=*/true, /*seed=*/0, nullptr, model.position().step);
  slowdown.step = &model.position().step;
  SlowStream stream(inner);
  // Three epochs: the figures of each are printed as it ends.
  model.fit(stream, {.epochs = 3,
                     .batch_size = batch,
                     .steps_per_epoch = steps / 3,
                     .callbacks = {std::make_shared<Report>()},
                     .verbose = false});
  return 0;
}

}  // namespace cohort::testing::straggler_program
