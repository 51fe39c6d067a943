// fit() through a strategy named on the command line, for the
// parameter_server strategy's tests (ps_strategy_test.cc) under cohortrun:
// a float64 classifier, 45 rows in uneven global batches of 6 for 3 epochs,
// evaluated after training; every training process writes its final
// parameters' bytes to <out>.<process index> and prints the evaluation.
//
//   ps_strategy_program --strategy SPEC --out PREFIX [--optimizer sgd|adam] [--slow-ms N]
//
// --slow-ms N: training process 1 sleeps N ms in every loss evaluation, after
// the step's parameters arrived and before its gradients leave (a worker that
// is late at every step, for backup_workers).
//
// A server rank serves (is_server()) and, once the strategy is destroyed,
// prints "ps_strategy_program: server N served, status S, strategy
// destroyed" and returns S; with serve_and_exit=true in the spec the
// strategy's constructor serves and ends the process instead, and the line
// never appears.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "cohort/common/flags.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/data/dataset.h"
#include "cohort/torch/fit/metric.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/strategy/make_strategy.h"
#include "tests/torch/torch_programs.h"

namespace cohort::testing::ps_strategy_program {

// The program's main(): torch_programs.cc calls it when the binary is
// started as ps_strategy_program.
int run(int argc, char** argv) {
  std::string spec, out, optimizer = "sgd";
  int64_t slow_ms = 0;
  try {
    cohort::flags::parse_flags(std::vector<std::string>(argv + 1, argv + argc),
                               {{"--strategy", [&](auto&, auto& v) { spec = v; }},
                                {"--out", [&](auto&, auto& v) { out = v; }},
                                {"--optimizer", [&](auto&, auto& v) { optimizer = v; }},
                                {"--slow-ms",
                                 [&](auto& f, auto& v) { slow_ms = cohort::flags::parse_number<int64_t>(f, v, 0); }}},
                               {});
    cohort::set_intra_op_threads(1);
    auto strategy = cohort::make_strategy(spec);
    if (strategy->is_server()) {
      const int status = strategy->serve();
      strategy.reset();
      std::printf("ps_strategy_program: server served, status %d, strategy destroyed\n", status);
      return status;
    }
    auto g = at::detail::createCPUGenerator(5);
    const at::Tensor x = at::randn({45, 6}, g, torch::kFloat64);
    const at::Tensor y = (x.sum(1) > 0).to(torch::kInt64);
    torch::manual_seed(11);
    torch::nn::Sequential net(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 2));
    net->to(torch::kFloat64);
    const auto delay = std::chrono::milliseconds(strategy->process_index() == 1 ? slow_ms : 0);
    cohort::Model model(
        *strategy, net,
        {.loss =
             [delay](const at::Tensor& o, const at::Tensor& t) {
               if (delay.count()) std::this_thread::sleep_for(delay);
               return torch::cross_entropy_loss(o, t);
             },
         .optimizer = optimizer == "adam"
                          ? cohort::optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(0.01))
                          : cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9)),
         .metrics = {cohort::accuracy()}});
    const cohort::TensorDataset data(x, y);
    const cohort::History h = model.fit(data, {.epochs = 3, .batch_size = 6, .seed = 3});
    const cohort::Logs eval = model.evaluate(data, {.batch_size = 10});
    std::ofstream f(out + "." + std::to_string(strategy->process_index()), std::ios::binary);
    for (const auto& p : model.module().parameters())
      f.write(static_cast<const char*>(p.data_ptr()), std::streamsize(p.nbytes()));
    if (model.is_chief())
      std::printf("%s: %zu epochs, training loss %.17g, evaluation loss %.17g accuracy %.17g\n",
                  strategy->spec().c_str(), h.epochs().size(), h.last().at("loss"), eval.at("loss"),
                  eval.at("accuracy"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_strategy_program: %s\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  }
}

}  // namespace cohort::testing::ps_strategy_program
