// fit_overhead: what fit() costs per step over the loop a user would write by
// hand for the same model, data and gradient exchange (the loop
// examples/fashion_mnist ran before it moved to fit()). Run under cohortrun;
// bench/fit_overhead.sh runs it and prints the table.
//
// Each round trains one epoch with the hand-written loop, one with fit()
// bare (COHORT_TELEMETRY=0) and one with fit() observed (step accounting
// and its publisher, a TensorBoard callback every 100 steps), rotating which
// goes first, over the same in-memory data; the per-step
// time of each is the epoch's wall time over its steps, the slowest rank's.
// Prints the median over rounds of each, their ratio, and the median of the
// rounds' own ratios (paired: the arms of a round share the machine's
// state of the moment, which on a shared machine drifts between rounds),
// and the paired median of observed / bare: what seeing the job costs.
//
//   cohortrun -np 2 build/bench/fit_overhead --model mlp --rounds 7
#include <cohort/cohort.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cohort/common/flags.h"
#include "cohort/common/stats.h"
#include "cohort/models/image_classifiers.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model = "mlp";
  int rounds = 7;
  int64_t rows = 8192;
  int64_t batch = 128;  // global
};

using cohort::median;

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y) { return torch::cross_entropy_loss(out, y); }

int run(const Flags& f) {
  cohort::set_intra_op_threads(1);
  cohort::init();
  const int rank = cohort::rank(), size = cohort::size();
  const std::string spec = size == 1 ? "one_device" : "multi_worker:style=horovod";
  const at::Tensor x = torch::randn({f.rows, 1, 28, 28}), y = torch::randint(0, 10, {f.rows}, torch::kLong);
  const int64_t steps = (f.rows + f.batch - 1) / f.batch;

  // The hand-written loop: DistributedOptimizer, this rank's rows of each
  // global batch of the epoch's permutation, the loss and the training
  // accuracy kept every step (fit() keeps both: its loss and the accuracy
  // metric), as a loop that reports them would.
  torch::manual_seed(1);
  torch::nn::Sequential hand_net = cohort::models::fashion_mnist_classifier(f.model);
  torch::optim::SGD hand_sgd(hand_net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::unique_ptr<cohort::DistributedOptimizer> hand_opt;
  if (size > 1) {
    cohort::broadcast_parameters(*hand_net, 0);
    hand_opt = std::make_unique<cohort::DistributedOptimizer>(hand_sgd, hand_net->named_parameters(),
                                                              cohort::DistributedOptimizerOptions{.name_prefix = "hand"});
  }
  auto hand_epoch = [&](int64_t epoch) {
    const std::vector<size_t> order = cohort::permutation(size_t(f.rows), 0, epoch);
    const at::Tensor order_t = torch::tensor(std::vector<int64_t>(order.begin(), order.end()), torch::kInt64);
    double loss_sum = 0, correct = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t begin = s * f.batch, n = std::min(f.batch, f.rows - begin);
      const cohort::RowBlock mine = cohort::reduce_scatter_block(n, size, rank);
      const at::Tensor rows = order_t.narrow(0, begin + mine.offset, mine.rows);
      const at::Tensor target = y.index_select(0, rows);
      if (hand_opt) hand_opt->zero_grad(); else cohort::zero_grad_to_none(hand_sgd);
      const at::Tensor output = hand_net->forward(x.index_select(0, rows));
      const at::Tensor loss = loss_of(output, target);
      loss.backward();
      if (hand_opt) hand_opt->step(); else hand_sgd.step();
      loss_sum += loss.item<double>() * double(mine.rows);
      correct += output.detach().argmax(1).eq(target).sum().item<double>();
    }
    return loss_sum + correct;
  };

  // fit() on the strategy with the same gradient exchange.
  auto strategy = cohort::make_strategy(spec);
  torch::manual_seed(1);
  cohort::Model model(*strategy, cohort::models::fashion_mnist_classifier(f.model),
                      {.loss = loss_of,
                       .optimizer = cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.01).momentum(0.9)),
                       .metrics = {cohort::accuracy()}});
  const cohort::TensorDataset data(x, y);

  std::vector<double> hand_ms, fit_ms, observed_ms;
  auto timed = [&](auto&& body) {
    cohort::barrier();
    const auto t0 = Clock::now();
    body();
    const double local = std::chrono::duration<double>(Clock::now() - t0).count();
    return cohort::allreduce(torch::tensor({local}, torch::kDouble), {.op = cohort::ReduceOp::max}).item<double>();
  };
  // fit() bare (COHORT_TELEMETRY=0: no step timing, no publisher thread),
  // and fit() observed: the step accounting and its publisher on, and a
  // TensorBoard callback writing batch scalars every 100 steps.
  const std::string tensorboard_dir = "/tmp/fit_overhead_tb." + std::to_string(::getpid());
  auto fit_epoch = [&](bool observed) {
    ::setenv("COHORT_TELEMETRY", observed ? "1" : "0", 1);
    std::vector<std::shared_ptr<cohort::Callback>> callbacks;
    if (observed) callbacks.push_back(cohort::tensorboard(tensorboard_dir, {.update_freq = 100}));
    model.fit(data, {.epochs = 1, .batch_size = f.batch, .catch_preemption = false, .callbacks = callbacks});
  };
  hand_epoch(0);  // warm-up of all three
  fit_epoch(false);
  fit_epoch(true);
  for (int r = 0; r < f.rounds; ++r) {
    auto hand = [&] { hand_ms.push_back(1e3 * timed([&] { hand_epoch(r + 1); }) / double(steps)); };
    auto fit = [&] { fit_ms.push_back(1e3 * timed([&] { fit_epoch(false); }) / double(steps)); };
    auto observed = [&] { observed_ms.push_back(1e3 * timed([&] { fit_epoch(true); }) / double(steps)); };
    // Each arm runs first, second and third equally often.
    switch (r % 3) {
      case 0:
        hand();
        fit();
        observed();
        break;
      case 1:
        fit();
        observed();
        hand();
        break;
      default:
        observed();
        hand();
        fit();
        break;
    }
  }
  std::filesystem::remove_all(tensorboard_dir);
  if (rank == 0) {
    const double h = median(hand_ms), t = median(fit_ms), o = median(observed_ms);
    std::vector<double> paired, paired_observed;
    for (size_t r = 0; r < hand_ms.size(); ++r) {
      paired.push_back(fit_ms[r] / hand_ms[r]);
      paired_observed.push_back(observed_ms[r] / fit_ms[r]);
    }
    std::printf("fit_overhead: model %s, %s, %d rank(s), global batch %lld, %lld steps/epoch, %d rounds\n",
                f.model.c_str(), strategy->spec().c_str(), size, (long long)f.batch, (long long)steps, f.rounds);
    std::printf(
        "hand-written loop: median %.3f ms/step\nfit():             median %.3f ms/step\n"
        "fit() observed:    median %.3f ms/step\n",
        h, t, o);
    std::printf(
        "{\"bench\":\"fit_overhead\",\"model\":\"%s\",\"ranks\":%d,\"hand_ms\":%.4f,\"fit_ms\":%.4f,"
        "\"observed_ms\":%.4f,\"ratio\":%.4f,\"paired_ratio\":%.4f,\"observed_paired_ratio\":%.4f}\n",
        f.model.c_str(), size, h, t, o, t / h, median(paired), median(paired_observed));
  }
  hand_opt.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  namespace flags = cohort::flags;
  try {
    flags::parse_flags(std::vector<std::string>(argv + 1, argv + argc),
                       {{"--model", [&](auto& n, auto& v) { f.model = flags::one_of(n, v, {"mlp", "cnn"}); }},
                        {"--rounds", [&](auto& n, auto& v) { f.rounds = flags::parse_number<int>(n, v, 1); }},
                        {"--rows", [&](auto& n, auto& v) { f.rows = flags::parse_number<int64_t>(n, v, 1); }},
                        {"--batch", [&](auto& n, auto& v) { f.batch = flags::parse_number<int64_t>(n, v, 1); }}},
                       {});
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_overhead: %s\n", flags::one_line_message(e).c_str());
    return 2;
  }
}
