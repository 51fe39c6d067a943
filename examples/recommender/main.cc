// recommender: a click-through model whose embedding table (10 M rows x 64
// by default, 2.5 GB of float32: more than a worker should hold) lives on
// parameter servers; workers pull and push only the rows their batch
// touches. See README.md.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

#include <cohort/cohort.h>

#include "cohort/common/flags.h"
#include "cohort/common/spec.h"
#include "cohort/parameter_server/roles.h"
#include "cohort/parameter_server/server.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/parameter_server/sharded_training.h"
#include "examples/recommender/clicks.h"
#include "examples/recommender/model.h"
#include "examples/recommender/options.h"

using namespace cohort;
using namespace cohort::examples::recommender;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kHeldOutStream = 1'000'000;

// Peak resident memory of this process, in MiB.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct Batch {
  at::Tensor ids, labels;
  ClickBatch raw;
};

Batch make_batch(const ClickGenerator& gen, uint64_t stream, uint64_t index, int64_t rows) {
  Batch b;
  b.raw = gen.batch(stream, index, rows);
  b.ids = torch::from_blob(b.raw.ids.data(), {rows, 2}, torch::kLong).clone();
  b.labels = torch::from_blob(b.raw.labels.data(), {rows}, torch::kFloat).clone();
  return b;
}

// Held-out loss and AUC of the current parameters (and the AUC of the true
// click probabilities, the best any model can do).
void evaluate(Recommender& model, const ClickGenerator& gen, const RecommenderOptions& o, int64_t step,
              double train_loss, std::ofstream* metrics) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<double> scores, truth;
  std::vector<float> labels;
  double loss = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    const Batch b = make_batch(gen, kHeldOutStream, static_cast<uint64_t>(i), o.batch);
    const at::Tensor logits = model->forward(b.ids);
    loss += torch::binary_cross_entropy_with_logits(logits, b.labels).item<double>();
    const at::Tensor p = torch::sigmoid(logits).to(torch::kDouble).contiguous();
    scores.insert(scores.end(), p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
    labels.insert(labels.end(), b.raw.labels.begin(), b.raw.labels.end());
    truth.insert(truth.end(), b.raw.truth.begin(), b.raw.truth.end());
  }
  model->train();
  loss /= static_cast<double>(o.eval_batches);
  const double a = auc(scores, labels), best = auc(truth, labels);
  std::printf("step %lld  train loss %.4f  held-out loss %.4f  AUC %.4f  (true probabilities: AUC %.4f)\n",
              static_cast<long long>(step), train_loss, loss, a, best);
  std::fflush(stdout);
  if (metrics && *metrics)
    *metrics << "{\"step\": " << step << ", \"train_loss\": " << train_loss << ", \"loss\": " << loss
             << ", \"auc\": " << a << ", \"auc_ceiling\": " << best << "}" << std::endl;
}

int run(const RecommenderOptions& o) {
  cohort::init();
  if (o.threads > 0) torch::set_num_threads(o.threads);
  const rendezvous::LaunchInfo info = rendezvous::discover();
  ClickModel click_model;
  click_model.users = o.rows / 2;
  click_model.items = o.rows - o.rows / 2;
  click_model.zipf = o.zipf;
  click_model.seed = o.seed;
  const ClickGenerator gen(click_model);

  const bool allreduce = o.strategy == "allreduce";
  ps::JobOptions job;
  ps::Role role{.server = false, .index = cohort::rank(), .num_servers = 0, .num_workers = cohort::size()};
  if (!allreduce) {
    job = ps::parse_job_options(parse_spec(o.strategy, "strategy").values, cohort::size());
    role = ps::assign_role(cohort::rank(), cohort::size(), job.servers);
  }
  auto store = std::make_shared<rendezvous::PrefixStore>("ps", cohort::world_store());
  if (role.server) {
    ps::Server server(store, ps::server_options_for(info, role, job));
    server.run();
    std::printf("server %d: done, peak memory %.0f MiB\n", role.index, peak_rss_mib());
    return 0;
  }

  Recommender model(RecommenderModelOptions{.rows = o.rows, .dim = o.dim, .hidden = o.hidden, .on_servers = !allreduce,
                                 .seed = o.seed});
  const bool chief = role.index == 0;
  if (chief)
    std::printf("recommender: %lld x %lld table (%.2f GB float32), %d worker(s), %d server(s), %s\n",
                static_cast<long long>(o.rows), static_cast<long long>(o.dim),
                static_cast<double>(o.rows * o.dim * 4) / 1e9, role.num_workers, role.num_servers,
                allreduce ? "allreduce of the whole table" : ps::describe(job).c_str());
  std::unique_ptr<ps::Worker> worker;
  std::unique_ptr<ShardedTraining> training;
  std::unique_ptr<torch::optim::Optimizer> local;
  if (allreduce) {
    local = std::make_unique<torch::optim::Adagrad>(model->parameters(), torch::optim::AdagradOptions(0.05));
  } else {
    worker = std::make_unique<ps::Worker>(
        store, ps::WorkerOptions{.worker = role.index, .num_workers = role.num_workers,
                                 .num_servers = role.num_servers, .job = job, .secret = info.secret});
    const auto start = Clock::now();
    training = std::make_unique<ShardedTraining>(
        *worker, *model,
        ShardedTrainingOptions{.dense = job.optimizer.rule == ps::UpdateRule::sum ? DenseMode::summation
                                                                                 : DenseMode::servers});
    if (chief)
      std::printf("table declared and initialized on the servers in %.1f s\n",
                  std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::ofstream metrics;
  if (chief && !o.metrics.empty()) metrics.open(o.metrics, std::ios::app);

  double loss_sum = 0;
  int64_t loss_count = 0;
  std::vector<double> step_seconds;
  const auto bytes_before = worker ? worker->counters() : ps::TransportCounters{};
  const auto training_start = Clock::now();
  for (int64_t step = training ? training->clock() : 0; step < o.steps; ++step) {
    const auto t0 = Clock::now();
    const Batch b = make_batch(gen, static_cast<uint64_t>(role.index), static_cast<uint64_t>(step), o.batch);
    if (training) training->begin_step();
    const at::Tensor loss = torch::binary_cross_entropy_with_logits(model->forward(b.ids), b.labels);
    loss.backward();
    if (training) {
      training->end_step(local.get());
    } else {
      for (auto& p : model->parameters())
        if (p.grad().defined()) cohort::allreduce_(p.grad());  // the mean over workers
      local->step();
    }
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    loss_sum += loss.item<double>();
    ++loss_count;
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (role.index == 1 && o.slow > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds * (o.slow - 1)));
    step_seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (chief && (step + 1) % o.log_every == 0) {
      std::printf("step %lld  loss %.4f  %.1f ms/step\n", static_cast<long long>(step + 1), loss_sum / loss_count,
                  1e3 * step_seconds.back());
      std::fflush(stdout);
    }
    if (chief && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps)) {
      if (training) training->pull();
      evaluate(model, gen, o, step + 1, loss_count ? loss_sum / loss_count : 0, &metrics);
      loss_sum = 0;
      loss_count = 0;
    }
  }
  const double total = std::chrono::duration<double>(Clock::now() - training_start).count();
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median = step_seconds.empty() ? 0 : step_seconds[step_seconds.size() / 2];
  double bytes_per_step = 0;
  if (worker) {
    const auto after = worker->counters();
    bytes_per_step = static_cast<double>(after.bytes_sent - bytes_before.bytes_sent + after.bytes_received -
                                         bytes_before.bytes_received) /
                     std::max<size_t>(1, step_seconds.size());
  } else {
    // A ring allreduce sends and receives 2 (n-1)/n of the buffer per rank.
    int64_t elements = 0;
    for (auto& p : model->parameters()) elements += p.numel();
    const double n = role.num_workers;
    bytes_per_step = 2 * 2 * (n - 1) / n * static_cast<double>(elements) * 4;
  }
  std::printf("worker %d: %zu steps in %.1f s, median %.2f ms/step, %.2f MB moved per step, %.0f steps/s, peak "
              "memory %.0f MiB\n",
              role.index, step_seconds.size(), total, 1e3 * median, bytes_per_step / 1e6,
              step_seconds.size() / std::max(total, 1e-9), peak_rss_mib());
  if (worker) worker->finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const RecommenderOptions o = parse_options({argv + 1, argv + argc});
    if (o.help) {
      std::cout << usage();
      return 0;
    }
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "recommender: " << flags::one_line_message(e) << std::endl;
    return 1;
  }
}
