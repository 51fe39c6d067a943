// A hand-written elastic training loop for the elastic tests
// (elastic_test.cc), under cohortrun --min-np: float64 linear regression,
// SGD with momentum (optimizer state), a global batch of --batch rows per
// member taken in order from a dataset of --rows rows, --epochs passes.
// Gradients are sums over each member's rows, allreduced with the row
// counts, so a step's update is the mean over the global batch whatever
// the world's size. The committed state also counts how often each row was
// trained on and records the world's size at every step.
//
// --kill SLOT:STEP:PHASE (repeatable) makes the first process of SLOT kill
// itself with SIGKILL at step STEP, PHASE "before" its allreduce, "after"
// it (before the commit), after the "commit", or "late" (it sleeps 1 s
// first, before its allreduce: the others form a world it never joins); it
// first prints "kill at
// T" (T: CLOCK_REALTIME seconds); SLOT:STEP:PHASE:BY makes the first process
// of slot BY kill SLOT's process instead (once: a parameter server, which
// runs no steps of its own; every process publishes its pid in the store).
// The first of the processes that train prints "step K world W epoch E at
// T" (W: the processes that train, E: the membership epoch) as it commits each step
// (bench/elastic.sh measures recovery from them). At the end rank 0 writes
// to --out: "steps N", "sizes s0 s1 ...", "counts c0 c1 ...", "params p0
// p1 ..." and the parameters before training, "initial ..." (%.17g).
//
// --model mlp trains cohort's synthetic mlp (20M parameters, float32,
// cross-entropy) on random rows instead, --model cnn the Fashion-MNIST
// example's cnn (206k parameters), for bench/elastic.sh.
//
// --scale-lr: the learning rate (0.05 at 3 members) scales linearly with
// the world (ElasticState::scale_learning_rate_with_world).
//
// --replacement-stalls makes every replacement process (incarnation > 0)
// sleep instead of joining (the launcher's --elastic-timeout then ends the
// job).
//
// --tensorboard DIR (with --fit): a TensorBoard callback writing every
// step's batch scalars into DIR.
//
// --fit trains the model with Model::fit instead (unchanged code: fit is
// elastic because the job is; --commit-steps: its elastic_commit_steps),
// --strategy (multi_worker:style=ddp), mean squared error (the linear
// model) or cross entropy (mlp, cnn), global batches of --batch rows in
// order, no shuffle; rank 0 prints its "step K world W epoch E at T" lines
// at each batch's end (bench/elastic.sh --strategy). Kill phases: "begin"
// (the step's batch-begin callback, before its collectives) and "end" (its
// batch-end callback, after its gradient exchange, before the commit). A
// callback records the world's size at every step in its state (which the
// commit carries); rank 0 writes "steps", "sizes", "initial", "params" and
// "losses" (the history's loss per epoch), and for the linear model
// "counts": how often each row was trained on (the loss records the row
// numbers the target carries; the batch-end callback sums them over the
// members into its committed state). --input pipeline reads the rows
// through cohort's input pipeline (PipelineInput over a MemorySource, in
// order) instead of a Dataset (--batch must then be a multiple of every
// world size). --private wraps the strategy in DP-SGD (Poisson sampling at
// --batch / --rows, clipping at 1, noise 0.5 added by rank 0 alone, so that
// a step's noise does not depend on the world; --split-noise: split shares
// instead, which an elastic job refuses) and writes "epsilon".
// --write STEP:FILE:TEXT (repeatable)
// makes rank 0 write TEXT, its commas as line ends, to FILE after step STEP
// (a host discovery script's hosts, changed mid-run); --hold STEP makes
// every member wait after step STEP until the launcher published a newer
// epoch (so that the change lands at that step's commit); --hold-below N
// makes every member of a world of fewer than N training processes wait
// after each step until the launcher published a newer epoch (a replacement
// registered), so that a replacement joins however long it takes to start
// (without it, a short job could end before a slow start joined).
//
//   elastic_program --out FILE [--rows 96] [--batch 4] [--epochs 3] [--kill S:K:P ...]
//                   [--step-delay-ms D] [--model linear|mlp|cnn] [--replacement-stalls]
//                   [--fit [--strategy S] [--input dataset|pipeline] [--private]]
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <signal.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <span>

#include "cohort/common/flags.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/membership.h"
#include "cohort/torch/strategy/parameter_server.h"
#include "tests/torch/elastic_rows.h"
#include "tests/torch/torch_programs.h"

namespace cohort::testing::elastic_program {

namespace {

using cohort::testing::elastic_feature;
using cohort::testing::elastic_target;
using cohort::testing::kElasticFeatures;

// CLOCK_REALTIME seconds: comparable between processes (bench/elastic.sh).
double now() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Kill {
  int slot = 0;
  int64_t step = 0;
  std::string phase;
  int by = -1;  // the slot whose process kills `slot`'s; -1: `slot`'s itself
  bool done = false;
};

std::string pid_key(int slot) { return "elastic_program/pid/" + std::to_string(slot); }

void write_values(std::ofstream& f, const char* name, const std::vector<double>& values) {
  char text[32];
  f << name;
  for (double v : values) {
    std::snprintf(text, sizeof text, " %.17g", v);
    f << text;
  }
  f << "\n";
}

// --fit's callbacks: the kills, the pacing, and each step's world size kept
// in the callback's state (committed with the fit's).
struct Write {
  int64_t step = 0;
  std::string file, text;
};

class FitProbe final : public cohort::Callback {
 public:
  // `seen`: the row numbers the loss was given in the step (null: not
  // counted), `rows` the data set's.
  FitProbe(cohort::Strategy& strategy, std::function<void(int64_t, const char*)> maybe_kill, int64_t delay_ms,
           std::vector<Write> writes, std::vector<int64_t> holds, int hold_below,
           std::shared_ptr<std::vector<at::Tensor>> seen, int64_t rows)
      : strategy_(strategy),
        maybe_kill_(std::move(maybe_kill)),
        delay_ms_(delay_ms),
        writes_(std::move(writes)),
        holds_(std::move(holds)),
        hold_below_(hold_below),
        seen_(std::move(seen)),
        counts_(seen_ ? size_t(rows) : 0, 0.0) {}
  std::string name() const override { return "fit_probe"; }
  void on_train_batch_begin(cohort::Model& model, int64_t, const cohort::Logs&) override {
    if (seen_) seen_->clear();  // what a step abandoned by a loss had seen
    maybe_kill_(model.position().step, "begin");
  }
  void on_train_batch_end(cohort::Model& model, int64_t, const cohort::Logs&) override {
    const int64_t step = model.position().step - 1;
    sizes_.resize(size_t(step + 1), 0);
    // The processes that train (a parameter-server job's world holds its
    // servers too), and their collectives.
    sizes_[size_t(step)] = double(strategy_.process_count());
    if (seen_) {
      // The step's rows over every member, counted into the committed state.
      at::Tensor used = torch::zeros({int64_t(counts_.size())}, torch::kDouble);
      for (const at::Tensor& rows : *seen_)
        used.index_add_(0, rows.to(torch::kLong), torch::ones({rows.numel()}, torch::kDouble));
      used = strategy_.all_sum(used).contiguous();
      const double* u = used.data_ptr<double>();
      for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += u[i];
    }
    if (delay_ms_ > 0) ::usleep(useconds_t(delay_ms_ * 1000));
    if (strategy_.process_index() == 0) {
      std::printf("step %lld world %d epoch %lld at %.6f\n", (long long)step, strategy_.process_count(),
                  (long long)cohort::membership_epoch(), now());
      std::fflush(stdout);
    }
    maybe_kill_(step, "end");
    for (const Write& w : writes_)
      if (w.step == step && strategy_.process_index() == 0) {
        std::string text = w.text;
        std::replace(text.begin(), text.end(), ',', '\n');
        std::ofstream(w.file + ".new") << text << "\n";
        std::rename((w.file + ".new").c_str(), w.file.c_str());  // the script never reads half a file
      }
    if (std::find(holds_.begin(), holds_.end(), step) != holds_.end() || strategy_.process_count() < hold_below_)
      for (int i = 0; i < 3000 && !cohort::membership_changed(); ++i) ::usleep(20000);
  }
  void save_state(cohort::CallbackState& state) const override {
    state["sizes"] = sizes_;
    state["counts"] = counts_;
  }
  void load_state(const cohort::CallbackState& state) override {
    const auto it = state.find("sizes");
    sizes_ = it == state.end() ? std::vector<double>{} : it->second;
    const auto counts = state.find("counts");
    if (counts != state.end()) counts_ = counts->second;
  }
  const std::vector<double>& sizes() const { return sizes_; }
  const std::vector<double>& counts() const { return counts_; }

 private:
  cohort::Strategy& strategy_;
  std::function<void(int64_t, const char*)> maybe_kill_;
  int64_t delay_ms_;
  std::vector<Write> writes_;
  std::vector<int64_t> holds_;
  int hold_below_;
  std::shared_ptr<std::vector<at::Tensor>> seen_;
  std::vector<double> sizes_;
  std::vector<double> counts_;
};

}  // namespace

// The program's main(): torch_programs.cc calls it when the binary is
// started as elastic_program.
int run(int argc, char** argv) {
  std::string out, kind = "linear", strategy_spec = "multi_worker:style=ddp", input = "dataset", tensorboard;
  int64_t rows = 96, batch = 4, epochs = 3, delay_ms = 0, commit_steps = 1;
  std::vector<Kill> kills;
  std::vector<Write> writes;
  std::vector<int64_t> holds;
  int hold_below = 0;
  bool replacement_stalls = false, fit = false, scale_lr = false, private_sgd = false, split_noise = false;
  try {
    cohort::flags::parse_flags(
        std::vector<std::string>(argv + 1, argv + argc),
        {{"--out", [&](auto&, auto& v) { out = v; }},
         {"--model",
          [&](auto& f, auto& v) {
            kind = cohort::flags::one_of(f, v, {"linear", "mlp", "cnn"});
          }},
         {"--rows", [&](auto& f, auto& v) { rows = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--batch", [&](auto& f, auto& v) { batch = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--epochs", [&](auto& f, auto& v) { epochs = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--strategy", [&](auto&, auto& v) { strategy_spec = v; }},
         {"--tensorboard", [&](auto&, auto& v) { tensorboard = v; }},
         {"--input",
          [&](auto& f, auto& v) {
            input = cohort::flags::one_of(f, v, {"dataset", "pipeline"});
          }},
         {"--commit-steps", [&](auto& f, auto& v) { commit_steps = cohort::flags::parse_number<int64_t>(f, v, 1); }},
         {"--hold", [&](auto& f, auto& v) { holds.push_back(cohort::flags::parse_number<int64_t>(f, v, 0)); }},
         {"--hold-below", [&](auto& f, auto& v) { hold_below = cohort::flags::parse_number<int>(f, v, 0); }},
         {"--write",
          [&](auto& f, auto& v) {
            const size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
            if (b == std::string::npos) throw cohort::ConfigError(f + " expects STEP:FILE:TEXT, got '" + v + "'");
            writes.push_back({std::stoll(v.substr(0, a)), v.substr(a + 1, b - a - 1), v.substr(b + 1)});
          }},
         {"--step-delay-ms", [&](auto& f, auto& v) { delay_ms = cohort::flags::parse_number<int64_t>(f, v, 0); }},
         {"--kill",
          [&](auto& f, auto& v) {
            Kill k;
            char phase[16] = {};
            long long step = 0;
            if (std::sscanf(v.c_str(), "%d:%lld:%15[^:]:%d", &k.slot, &step, phase, &k.by) < 3)
              throw cohort::ConfigError(f + " expects SLOT:STEP:PHASE[:BY], got '" + v + "'");
            k.step = step;
            k.phase = phase;
            kills.push_back(k);
          }}},
        {{"--replacement-stalls", [&] { replacement_stalls = true; }},
         {"--fit", [&] { fit = true; }},
         {"--private", [&] { private_sgd = true; }},
         {"--split-noise", [&] { split_noise = true; }},
         {"--scale-lr", [&] { scale_lr = true; }}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_program: %s\n", cohort::flags::one_line_message(e).c_str());
    return 2;
  }
  torch::set_num_threads(1);
  const cohort::rendezvous::LaunchInfo me = cohort::rendezvous::discover();
  auto maybe_kill = [&](int64_t step, const char* phase) {
    if (me.elastic_incarnation != 0) return;  // only a slot's first process
    for (Kill& k : kills)
      if (k.by == me.elastic_slot && k.step == step && k.phase == phase && !k.done) {
        k.done = true;
        const pid_t pid = pid_t(std::stol(cohort::world_store()->get(pid_key(k.slot))));
        std::printf("kill at %.6f\n", now());
        std::fflush(stdout);
        ::kill(pid, SIGKILL);
      }
    for (const Kill& k : kills)
      if (k.by < 0 && k.slot == me.elastic_slot && k.step == step && k.phase == phase) {
        if (k.phase == "late") ::sleep(1);
        std::printf("kill at %.6f\n", now());
        std::fflush(stdout);
        ::raise(SIGKILL);
      }
  };

  if (replacement_stalls && me.elastic_incarnation > 0) ::sleep(600);
  // Started through a launch template for a "host" (the multi-host tests).
  if (const char* host = std::getenv("COHORT_TEST_HOST"); host && me.elastic_joining) {
    std::printf("slot %d.%d joins on %s\n", me.elastic_slot, me.elastic_incarnation, host);
    std::fflush(stdout);
  }
  try {
    cohort::init();
    if (me.elastic_slot >= 0) cohort::world_store()->set(pid_key(me.elastic_slot), std::to_string(::getpid()));
  } catch (const cohort::rendezvous::MembershipEnded& e) {
    // A replacement that came too late: the job is over without it.
    std::fprintf(stderr, "elastic_program: not joining: %s\n", e.what());
    return 0;
  }
  torch::manual_seed(7);
  const bool mlp = kind != "linear";  // a classifier on random images
  torch::nn::Sequential model = kind == "mlp"   ? cohort::models::synthetic_classifier("mlp")
                                : kind == "cnn" ? cohort::models::fashion_mnist_classifier("cnn")
                                                : torch::nn::Sequential(torch::nn::Linear(kElasticFeatures, 1));
  if (!mlp) model->to(torch::kDouble);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  at::Tensor x, y;
  if (mlp) {
    x = torch::randn({rows, 1, 28, 28});
    y = torch::randint(0, 10, {rows}, torch::kLong);
  } else {
    x = torch::empty({rows, kElasticFeatures}, torch::kDouble);
    y = torch::empty({rows, 1}, torch::kDouble);
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < kElasticFeatures; ++j) x[i][j] = elastic_feature(i, j);
      y[i][0] = elastic_target(i);
    }
  }
  // Sums over the rows: the step divides by the global batch's rows.
  auto loss_of = [&](const at::Tensor& pred, const at::Tensor& target) {
    return mlp ? torch::nn::functional::cross_entropy(
                     pred, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               : 0.5 * (pred - target).pow(2).sum();
  };
  const int64_t max_steps = epochs * rows;  // at least one row a step
  at::Tensor counts = torch::zeros({rows}, torch::kLong), sizes = torch::zeros({max_steps}, torch::kLong);

  // Every parameter's values in order, as float64.
  auto flat_parameters = [&] {
    std::vector<at::Tensor> parts;
    for (auto& p : model->parameters()) parts.push_back(p.detach().reshape(-1).to(torch::kDouble));
    const at::Tensor all = torch::cat(parts).contiguous();
    return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  };
  const std::vector<double> initial = flat_parameters();

  if (fit) {
    std::unique_ptr<cohort::Strategy> strategy = cohort::make_strategy(strategy_spec);
    if (strategy->is_server()) return strategy->serve();  // parameter_server's: until training is over
    if (private_sgd) {
      const auto share = split_noise ? cohort::privacy::NoiseShare::split : cohort::privacy::NoiseShare::designated;
      strategy = cohort::privacy::make_private(std::move(strategy), {.noise_multiplier = 0.5,
                                                                     .max_grad_norm = 1.0,
                                                                     .sample_rate = double(batch) / double(rows),
                                                                     .seed = 5,
                                                                     .noise_share = share});
    }
    // The linear model's targets carry their row numbers (column 1), which
    // the loss records for the probe's counts.
    auto seen = mlp ? nullptr : std::make_shared<std::vector<at::Tensor>>();
    if (!mlp) y = torch::cat({y, torch::arange(rows, torch::kDouble).unsqueeze(1)}, 1);
    cohort::Model trainer(*strategy, model,
                          {.loss = [mlp, seen](const at::Tensor& out, const at::Tensor& target) {
                             if (mlp) return torch::nn::functional::cross_entropy(out, target);
                             seen->push_back(target.select(1, 1).detach().clone());
                             return torch::mse_loss(out, target.narrow(1, 0, 1));
                           },
                           .optimizer = cohort::optimizer_factory<torch::optim::SGD>(
                               torch::optim::SGDOptions(0.05).momentum(0.9))});
    auto probe = std::make_shared<FitProbe>(*strategy, maybe_kill, delay_ms, writes, holds, hold_below, seen, rows);
    std::vector<std::shared_ptr<cohort::Callback>> callbacks = {probe};
    if (!tensorboard.empty()) callbacks.push_back(cohort::tensorboard(tensorboard, {.update_freq = 1}));
    const cohort::FitOptions options{.epochs = epochs,
                                     .batch_size = batch,
                                     .shuffle = false,
                                     .callbacks = callbacks,
                                     .elastic_commit_steps = commit_steps};
    cohort::History history;
    if (input == "pipeline") {
      std::vector<cohort::data::Sample> samples;
      for (int64_t i = 0; i < rows; ++i) {
        cohort::data::Sample s{.index = uint64_t(i)};
        s.features.set("x", cohort::data::Feature::of(std::span<const double>(x[i].data_ptr<double>(), x.size(1))));
        s.features.set("y", cohort::data::Feature::of(std::span<const double>(y[i].data_ptr<double>(), y.size(1))));
        samples.push_back(std::move(s));
      }
      cohort::PipelineInput stream(std::make_shared<cohort::data::MemorySource>(std::move(samples)),
                                   {.input = "x", .target = "y",
                                    .pipeline = {.order = {.shuffle = false}, .workers = 1, .prefetch = 2}});
      history = trainer.fit(stream, options);
    } else {
      history = trainer.fit(cohort::TensorDataset(x, y), options);
    }
    // zero stage 3 keeps no parameters between steps: gathered (collective).
    if (auto* zero = dynamic_cast<cohort::ZeroStrategy*>(strategy.get()); zero && cohort::initialized())
      zero->gather_parameters();
    // Parameters held on parameter servers: their values, pulled.
    if (dynamic_cast<cohort::ParameterServerStrategy*>(strategy.get()) && cohort::initialized()) strategy->module();
    // A rank that discovery removed has left the job (and has no world).
    if (cohort::initialized() && strategy->process_index() == 0 && !out.empty()) {
      std::ofstream f(out);
      f << "steps " << probe->sizes().size() << "\n";
      write_values(f, "sizes", probe->sizes());
      write_values(f, "initial", initial);
      write_values(f, "params", flat_parameters());
      write_values(f, "losses", history.values("loss"));
      if (seen) write_values(f, "counts", probe->counts());
      if (auto* dp = dynamic_cast<cohort::privacy::PrivateStrategy*>(strategy.get()))
        write_values(f, "epsilon", {dp->epsilon(), double(dp->steps())});
    }
    cohort::shutdown();
    return 0;
  }

  cohort::ElasticState state(*model, optimizer);
  state.scale_learning_rate_with_world(scale_lr);
  int64_t& epoch = state.counter("epoch");
  int64_t& cursor = state.counter("cursor");  // rows of this epoch already trained on
  int64_t& step = state.counter("step");
  state.track("counts", counts);
  state.track("sizes", sizes);

  cohort::run_elastic(state, [&] {
    while (epoch < epochs) {
      const int64_t world = cohort::size(), rank = cohort::rank();
      // This step's global batch, cut evenly over the members.
      const int64_t take = std::min(world * batch, rows - cursor);
      const int64_t per = take / world, extra = take % world;
      const int64_t begin = cursor + rank * per + std::min(rank, extra), n = per + (rank < extra ? 1 : 0);
      optimizer.zero_grad();
      at::Tensor delta = torch::zeros({rows}, torch::kLong);
      if (n > 0) {
        loss_of(model->forward(x.narrow(0, begin, n)), y.narrow(0, begin, n)).backward();
        delta.narrow(0, begin, n).fill_(1);
      } else {
        for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
      }
      // Each gradient summed in place (named, so the engine fuses the small
      // ones), with the row counts; then divided by the global batch's rows.
      maybe_kill(step, "before");
      // "late": a member that stalls in the step (while the others, having
      // lost another, form a new world without it) and then dies.
      maybe_kill(step, "late");
      std::vector<cohort::TensorHandle> handles;
      const auto named = model->named_parameters();
      for (const auto& item : named)
        handles.push_back(cohort::allreduce_async_(item.value().grad(), {.name = "grad/" + item.key(),
                                                                         .op = cohort::ReduceOp::sum}));
      const at::Tensor rows_here = torch::full({1}, double(n), torch::kDouble);
      const double total = cohort::allreduce(rows_here, {.name = "rows", .op = cohort::ReduceOp::sum}).item<double>();
      const at::Tensor used = cohort::allreduce(delta, {.name = "used", .op = cohort::ReduceOp::sum});
      for (auto& h : handles) h.wait();
      maybe_kill(step, "after");
      for (auto& p : model->parameters()) p.mutable_grad().div_(total);
      optimizer.step();
      counts += used;
      sizes[step] = world;
      cursor += take;
      if (cursor == rows) {
        cursor = 0;
        ++epoch;
      }
      ++step;
      if (delay_ms > 0) ::usleep(useconds_t(delay_ms * 1000));
      // Printed before the commit, which may throw MembershipChanged after
      // committing (a replacement joins).
      if (cohort::rank() == 0) {
        std::printf("step %lld world %lld epoch %lld at %.6f\n", (long long)(step - 1), (long long)world,
                    (long long)cohort::membership_epoch(), now());
        std::fflush(stdout);
      }
      state.commit();
      maybe_kill(step - 1, "commit");
    }
  });

  if (cohort::rank() == 0 && !out.empty()) {
    std::ofstream f(out);
    f << "steps " << step << "\nsizes";
    for (int64_t k = 0; k < step; ++k) f << " " << sizes[k].item<int64_t>();
    f << "\ncounts";
    for (int64_t i = 0; i < rows; ++i) f << " " << counts[i].item<int64_t>();
    f << "\n";
    write_values(f, "initial", initial);
    write_values(f, "params", flat_parameters());
  }
  cohort::shutdown();
  return 0;
}

}  // namespace cohort::testing::elastic_program
