// A small fit() run for the resume tests (fit_resume_test.cc), under
// cohortrun: float64 model with dropout (random numbers), Adam (state),
// ReduceLROnPlateau and EarlyStopping (callback state) and
// BackupAndRestore after every step; it prints
// "step N" after each step's backup and writes the final parameters' bytes
// to --out. For the tests: --hang-at K stops every rank after step K's
// backup (the test then kills the job there), --step-delay-ms D slows each
// step (so that a signal arrives mid-run), --backup-every N backs up every
// N steps instead of every step, --tensorboard DIR adds TensorBoard's
// callback with a batch summary every step.
//
//   fit_resume_program --backup DIR --out FILE [--style ddp|horovod] [--strategy SPEC] [--epochs N]
//                      [--hang-at K] [--step-delay-ms D] [--backup-every N] [--tensorboard DIR]
// --strategy replaces multi_worker:style=... (zero:stage=3: the backup's
// model and optimizer state are sharded).
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cohort/common/flags.h"
#include "tests/torch/torch_programs.h"

namespace cohort::testing::fit_resume_program {

namespace {

struct Announcer : cohort::Callback {
  int64_t hang_at = 0, delay_ms = 0;
  std::string name() const override { return "announcer"; }
  void on_train_begin(cohort::Model& model, const cohort::Logs&) override {
    std::printf("pid %d\n", int(::getpid()));
    std::fflush(stdout);
  }
  void on_train_batch_end(cohort::Model& model, int64_t, const cohort::Logs&) override {
    if (model.is_chief()) {
      std::printf("step %lld\n", (long long)model.position().step);
      std::fflush(stdout);
    }
    if (model.position().step == hang_at) ::sleep(600);
    if (delay_ms > 0) ::usleep(useconds_t(delay_ms * 1000));
  }
};

}  // namespace

// The program's main(): torch_programs.cc calls it when the binary is
// started as fit_resume_program.
int run(int argc, char** argv) {
  std::string backup, out, style = "ddp", spec, tensorboard;
  int64_t epochs = 4, backup_every = 1;
  auto announcer = std::make_shared<Announcer>();
  try {
    cohort::flags::parse_flags(
        std::vector<std::string>(argv + 1, argv + argc),
        {{"--backup", [&](auto&, auto& v) { backup = v; }},
         {"--out", [&](auto&, auto& v) { out = v; }},
         {"--style", [&](auto&, auto& v) { style = v; }},
         {"--strategy", [&](auto&, auto& v) { spec = v; }},
         {"--epochs", [&](auto& f, auto& v) { epochs = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--hang-at", [&](auto& f, auto& v) { announcer->hang_at = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--step-delay-ms",
          [&](auto& f, auto& v) { announcer->delay_ms = cohort::flags::parse_number<int64_t>(f, v, 0); }},
         {"--backup-every", [&](auto& f, auto& v) { backup_every = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--tensorboard", [&](auto&, auto& v) { tensorboard = v; }}},
        {});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_resume_program: %s\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  }
  cohort::set_intra_op_threads(1);
  auto strategy = cohort::make_strategy(spec.empty() ? "multi_worker:style=" + style : spec);

  auto g = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({45, 6}, g, torch::kFloat64);
  const at::Tensor y = (x.sum(1) > 0).to(torch::kInt64);
  torch::manual_seed(11);
  torch::nn::Sequential net(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Dropout(0.2),
                            torch::nn::Linear(16, 2));
  net->to(torch::kFloat64);
  cohort::Model model(*strategy, net,
                      {.loss = [](const at::Tensor& o, const at::Tensor& t) { return torch::cross_entropy_loss(o, t); },
                       .optimizer = cohort::optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(0.01)),
                       .metrics = {cohort::accuracy()}});
  std::vector<std::shared_ptr<cohort::Callback>> callbacks = {
      cohort::reduce_lr_on_plateau({.monitor = "loss", .factor = 0.5, .patience = 0}),
      cohort::early_stopping({.monitor = "loss", .patience = 100}),
      cohort::backup_and_restore(backup, {.every_steps = backup_every}), announcer};
  if (!tensorboard.empty()) callbacks.insert(callbacks.begin(), cohort::tensorboard(tensorboard, {.update_freq = 1}));
  const cohort::History h =
      model.fit(cohort::TensorDataset(x, y),
                {.epochs = epochs, .batch_size = 6, .validation_data = nullptr, .seed = 3, .callbacks = callbacks});
  if (h.preempted()) return cohort::kPreemptedExitCode;
  // Stage 3 holds only its blocks between steps (collective).
  if (auto* zero = dynamic_cast<cohort::ZeroStrategy*>(strategy.get())) zero->gather_parameters();
  if (model.is_chief()) {
    std::ofstream f(out, std::ios::binary);
    for (const auto& p : model.module().parameters())
      f.write(static_cast<const char*>(p.data_ptr()), std::streamsize(p.nbytes()));
    h.write_csv(out + ".csv");  // every epoch's merged loss and accuracy
    std::printf("done: %zu epochs, loss %.17g\n", h.epochs().size(), h.last().at("loss"));
  }
  return 0;
}

}  // namespace cohort::testing::fit_resume_program
