// char_lm: a character-level transformer language model trained on Debian's
// fortunes with data (dp), pipeline (pp) and tensor (tp) parallelism at
// once. Under cohortrun every rank runs this program; --dp x --pp x --tp
// must equal the number of ranks. See usage() in options.cc for the flags.
//
//   cohortrun -np 4 build/examples/char_lm --dp 2 --pp 2 --tp 1 --steps 200
//
// The global batch of every step is the same whatever the mesh (batches.h)
// and every mesh starts from the same weights (model.h), so runs on
// different meshes train the same model and their loss curves agree up to
// rounding.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "cohort/common/error.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/data_parallel/zero_optimizer.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "examples/char_lm/batches.h"
#include "examples/char_lm/corpus.h"
#include "examples/char_lm/options.h"
#include "examples/char_lm/parallel_lm.h"
#include "examples/char_lm/sampling.h"
#include "examples/char_lm/vocabulary.h"

namespace lm = cohort::examples::char_lm;
using Clock = std::chrono::steady_clock;
using cohort::MeshAxis;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

cohort::OptimizerFactory optimizer_factory(const lm::CharLmOptions& o) {
  if (o.optimizer == "sgd")
    return cohort::optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(o.lr).momentum(o.momentum));
  return cohort::optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(o.lr));
}

// This rank's optimizer: over its stage's (tp-sliced) parameters, the
// gradients averaged over dp by the model; or, with --zero, ZeRO over the
// dp axis, which reduce-scatters them itself after the pipeline's
// micro-batches and steps this replica's blocks.
class StageOptimizer {
 public:
  StageOptimizer(const lm::CharLmOptions& o, lm::ParallelLm& model, cohort::Mesh& mesh) {
    if (o.zero == 0) {
      plain_ = optimizer_factory(o)(model.parameters());
    } else {
      zero_ = std::make_unique<cohort::ZeroOptimizer>(
          model.parameters(), optimizer_factory(o),
          cohort::ZeroOptions{.stage = o.zero, .overlap = false, .engine = &mesh.engine(MeshAxis::dp)});
    }
  }
  void zero_grad() {
    if (zero_) zero_->zero_grad(); else plain_->zero_grad();
  }
  void step() {
    if (zero_) zero_->step(); else plain_->step();
  }

 private:
  std::unique_ptr<torch::optim::Optimizer> plain_;
  std::unique_ptr<cohort::ZeroOptimizer> zero_;
};

// What every rank derives from the flags and the corpus alone.
struct Prepared {
  lm::Corpus corpus;
  lm::Vocabulary vocab;
  lm::ModelShape shape;
  std::optional<lm::WindowBatches> batches;
};

Prepared prepare(const lm::CharLmOptions& o) {
  Prepared p;
  lm::check_world(o, cohort::size());
  // Every rank reads the corpus (1-3 MB): cheaper than broadcasting it.
  p.corpus = lm::load_corpus(o.corpus);
  p.vocab = lm::Vocabulary::from_text(p.corpus.text);
  p.shape = {.vocab = p.vocab.padded_size(o.vocab_multiple),
             .d_model = o.d_model,
             .heads = o.heads,
             .layers = o.layers,
             .seq_len = o.seq_len};
  p.batches.emplace(p.vocab.encode(p.corpus.text), o.seq_len, o.seed);
  return p;
}

void train(const lm::CharLmOptions& o, int world_rank) {
  const Prepared data = prepare(o);
  const lm::Corpus& corpus = data.corpus;
  const lm::Vocabulary& vocab = data.vocab;
  const lm::ModelShape& shape = data.shape;
  const lm::WindowBatches& batches = *data.batches;
  if (o.threads > 0) cohort::set_intra_op_threads(o.threads);

  cohort::Mesh mesh({.dp = o.dp, .pp = o.pp, .tp = o.tp});
  const cohort::Schedule schedule = o.schedule == "gpipe" ? cohort::Schedule::gpipe : cohort::Schedule::one_f_one_b;
  lm::ParallelLm model(mesh, shape,
                       {.micro_batches = o.micro_batches,
                        .schedule = schedule,
                        .init = {.seed = o.seed, .dtype = o.dtype == "float64" ? at::kDouble : at::kFloat},
                        .synchronize_gradients = o.zero == 0});
  StageOptimizer optimizer(o, model, mesh);
  const lm::RowRange rows = lm::replica_rows(o.batch_size, o.dp, mesh.rank(MeshAxis::dp));

  if (world_rank == 0) {
    int64_t n_params = 0;
    for (const auto& [name, p] : lm::full_parameters(shape, {.seed = o.seed}, o.pp)) n_params += p.numel();
    std::printf("char_lm: %zu fortunes from %zu files in %s (%zu characters), vocabulary %lld (padded to %lld)\n",
                corpus.fortunes.size(), corpus.files.size(), corpus.dir.c_str(), corpus.text.size(),
                (long long)vocab.size(), (long long)shape.vocab);
    std::printf(
        "char_lm: model d_model %lld, %lld heads, %lld blocks, context %lld (%lld parameters); "
        "mesh dp %d x pp %d x tp %d, %s schedule, %d micro-batches; global batch %lld x %lld characters, "
        "%s lr %g%s, %s, %d thread%s per rank\n",
        (long long)o.d_model, (long long)o.heads, (long long)o.layers, (long long)o.seq_len, (long long)n_params, o.dp,
        o.pp, o.tp, cohort::schedule_name(schedule), o.micro_batches, (long long)o.batch_size, (long long)o.seq_len,
        o.optimizer.c_str(), o.lr, o.zero == 0 ? "" : (" (ZeRO stage " + std::to_string(o.zero) + " over dp)").c_str(),
        o.dtype.c_str(), torch::get_num_threads(), torch::get_num_threads() == 1 ? "" : "s");
    std::fflush(stdout);
  }

  const double tokens_per_step = double(o.batch_size) * double(o.seq_len);
  double first_loss = 0, last_loss = 0;
  // Throughput leaves out step 0 (allocations, first messages) when there
  // are more steps.
  Clock::time_point timed_start = Clock::now(), interval_start = Clock::now();
  int64_t interval_steps = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    if (step == 1) timed_start = Clock::now();
    const std::vector<int64_t> flat = batches.rows(step, rows);
    const at::Tensor windows =
        torch::tensor(flat, torch::TensorOptions().dtype(torch::kLong)).reshape({rows.end - rows.begin, o.seq_len + 1});
    optimizer.zero_grad();
    const at::Tensor loss = model.forward_backward(windows);
    optimizer.step();
    ++interval_steps;

    const bool log = step == 0 || (step + 1) % o.log_every == 0 || step + 1 == o.steps;
    if (!log) continue;
    const double global = model.global_loss(loss);  // collective over dp, on every rank alike
    if (step == 0) first_loss = global;
    last_loss = global;
    const double rate = tokens_per_step * double(interval_steps) / std::max(1e-9, seconds_since(interval_start));
    if (world_rank == 0) {
      std::printf("step %lld/%lld: loss %.4f, %.0f tokens/s\n", (long long)step + 1, (long long)o.steps, global, rate);
      std::fflush(stdout);
    }
    interval_start = Clock::now();
    interval_steps = 0;
  }
  const int64_t timed_steps = o.steps > 1 ? o.steps - 1 : 1;
  const double tokens_per_s = tokens_per_step * double(timed_steps) / std::max(1e-9, seconds_since(timed_start));

  // Every rank samples together through the pipeline (sampling.h).
  const std::string line =
      lm::sample_line([&](const at::Tensor& ids) { return model.logits(ids); }, o.seq_len, vocab,
                      {.prompt = o.prompt, .max_chars = o.sample_chars, .temperature = o.temperature, .seed = o.seed});
  if (world_rank == 0) {
    std::printf(
        "char_lm: trained %lld steps on dp %d x pp %d x tp %d (%s, %d micro-batches): loss %.6f -> %.6f, "
        "%.0f tokens/s\n",
        (long long)o.steps, o.dp, o.pp, o.tp, cohort::schedule_name(schedule), o.micro_batches, first_loss, last_loss,
        tokens_per_s);
    std::printf("char_lm: sample: %s\n", line.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  lm::CharLmOptions options;
  try {
    options = lm::parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "char_lm: error: %s (char_lm --help lists the flags)\n", e.what());
    return 2;
  }
  if (options.help) {
    std::fputs(lm::usage().c_str(), stdout);
    return 0;
  }
  try {
    cohort::init();
    // The mesh and the model go (collectively) before the world engine.
    train(options, cohort::rank());
    cohort::shutdown();
    return 0;
  } catch (const std::exception& e) {
    const bool config = dynamic_cast<const cohort::ConfigError*>(&e) != nullptr;
    // Every rank says why it stops: cohortrun shows the first failing
    // rank's last lines, and stops the others as soon as one exits.
    std::fprintf(stderr, "char_lm: error: %s\n", e.what());
    // Tell the other ranks why this one stops, instead of leaving them to
    // time out waiting for it.
    if (cohort::initialized()) {
      try {
        cohort::current_engine().abort(e.what());
      } catch (...) {
      }
    }
    return config ? 2 : 1;
  }
}
