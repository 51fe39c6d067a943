#include "cohort/torch/model_parallel/pipeline.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/torch/model_parallel/activation_channel.h"

namespace cohort {
namespace {

using Kind = PipelineAction::Kind;

std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << "shape " << t.sizes() << " " << c10::toString(t.scalar_type());
  return os.str();
}

// The first line of a torch error: the rest is a C++ backtrace.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

size_t bytes_of(const at::Tensor& t) { return t.defined() ? size_t(t.nbytes()) : 0; }

// What a stage holds for one micro-batch between its forward and backward.
struct MicroBatch {
  at::Tensor input;   // the stage input (a leaf requiring grad after stage 0)
  at::Tensor output;  // stage output (last stage: the loss), with its graph
  at::Tensor target;  // last stage
  at::Tensor input_grad;
  std::optional<at::Generator> rng;  // generator state before the first forward (recompute)
  size_t held_bytes = 0;
};

}  // namespace

struct Pipeline::Impl {
  StageFn fn;
  std::shared_ptr<comm::Communicator> pp;
  PipelineOptions options;
  int stage = 0;
  int stages = 1;
  Stats stats;
  int live = 0;
  size_t live_bytes = 0;

  std::string name(int s) const {
    return "pipeline stage " + std::to_string(s) + " of " + std::to_string(stages);
  }

  // Rows of micro-batch j of a batch of `rows` split `m` ways, and its start.
  static int64_t rows_of(int64_t rows, int m, int j) { return rows / m + (j < rows % m ? 1 : 0); }
  static int64_t start_of(int64_t rows, int m, int j) { return j * (rows / m) + std::min<int64_t>(j, rows % m); }

  // Stage 0 announces the batch's rows so that every stage can validate the
  // split before any message flows (the same error everywhere, no hang).
  int64_t agree_batch_rows(const at::Tensor& input, const char* call) {
    int64_t rows = 0;
    if (stage == 0) {
      COHORT_CHECK_AS(ConfigError, input.defined() && input.dim() >= 1)
          << name(0) << ": " << call << " needs the input (at least one dimension) on the first stage";
      rows = input.size(0);
    }
    if (stages > 1) pp->broadcast(BufferView{&rows, 1, DType::i64}, 0);
    return rows;
  }

  at::Tensor run_stage(const MicroBatch& mb, int j, int m) {
    try {
      return fn(mb.input);
    } catch (const c10::Error& e) {
      // Most often the previous stage's output does not fit this stage.
      const std::string from = stage == 0 ? std::string("the input") : "the activation from " + name(stage - 1);
      COHORT_THROW(MismatchError) << name(stage) << " failed on micro-batch " << j << " of " << m << " ("
                                  << from << ", " << describe(mb.input) << "): " << first_line(e.what());
    }
  }

  void hold(MicroBatch& mb) {
    mb.held_bytes = bytes_of(mb.input) + (options.recompute_activations ? 0 : bytes_of(mb.output));
    ++live;
    live_bytes += mb.held_bytes;
    stats.peak_live_micro_batches = std::max(stats.peak_live_micro_batches, live);
    stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, live_bytes);
  }

  void release(MicroBatch& mb) {
    --live;
    live_bytes -= mb.held_bytes;
    mb.held_bytes = 0;
  }

  at::Tensor loss_of(const at::Tensor& output, const MicroBatch& mb, const LossFn& loss_fn, int j) {
    at::Tensor loss = loss_fn(output, mb.target);
    COHORT_CHECK_AS(ConfigError, loss.defined() && loss.numel() == 1 && loss.is_floating_point())
        << name(stage) << ": loss_fn must return one floating-point element (the micro-batch's mean loss); for "
        << "micro-batch " << j << " it returned " << (loss.defined() ? describe(loss) : "an undefined tensor");
    return loss.reshape({});
  }

  // Forward of micro-batch j; returns the loss (last stage) or the output.
  void forward(MicroBatch& mb, int j, int m, const LossFn* loss_fn) {
    const bool last = stage == stages - 1;
    if (options.recompute_activations) {
      // Same dropout masks in the second run (see the header).
      auto gen = at::detail::getDefaultCPUGenerator();
      {
        std::lock_guard lock(gen.mutex());
        mb.rng = gen.clone();
      }
      torch::NoGradGuard no_grad;
      at::Tensor out = run_stage(mb, j, m);
      mb.output = last && loss_fn ? loss_of(out, mb, *loss_fn, j) : out;
    } else {
      at::Tensor out = run_stage(mb, j, m);
      mb.output = last && loss_fn ? loss_of(out, mb, *loss_fn, j) : out;
    }
  }

  void recompute(MicroBatch& mb, int j, int m, const LossFn* loss_fn) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::optional<at::Generator> current;
    {
      std::lock_guard lock(gen.mutex());
      current = gen.clone();
      gen.set_state(mb.rng->get_state());
    }
    at::Tensor out;
    try {
      out = run_stage(mb, j, m);
    } catch (...) {
      std::lock_guard lock(gen.mutex());
      gen.set_state(current->get_state());
      throw;
    }
    {
      std::lock_guard lock(gen.mutex());
      gen.set_state(current->get_state());
    }
    mb.output = stage == stages - 1 && loss_fn ? loss_of(out, mb, *loss_fn, j) : out;
  }

  void send(const at::Tensor& t, int dst, MessageKind kind, int j, int m, int64_t rows) {
    send_tensor(*pp, dst, t, {.kind = kind, .micro_batch = j, .micro_batches = m, .batch_rows = rows});
    stats.bytes_sent += bytes_of(t);
  }

  at::Tensor recv(int src, MessageExpectation expect) {
    expect.self = name(stage);
    expect.peer = name(src);
    at::Tensor t = recv_tensor(*pp, src, expect);
    stats.bytes_received += bytes_of(t);
    return t;
  }

  void check_activation(const at::Tensor& out, int j) {
    COHORT_CHECK_AS(ConfigError, out.defined() && out.is_floating_point())
        << name(stage) << " returned " << (out.defined() ? describe(out) : "an undefined tensor")
        << " for micro-batch " << j << "; tensors between stages must be floating point (gradients flow back "
        << "through them)";
  }

  at::Tensor train_step(const at::Tensor& input, const at::Tensor& target, const LossFn& loss_fn) {
    const int64_t rows = agree_batch_rows(input, "train_step");
    const int m = options.micro_batches;
    COHORT_CHECK_AS(ConfigError, rows >= m)
        << name(stage) << ": a batch of " << rows << " rows cannot be split into " << m
        << " micro-batches (PipelineOptions::micro_batches)";
    const bool first = stage == 0, last = stage == stages - 1;
    if (last) {
      COHORT_CHECK_AS(MismatchError, target.defined() && target.dim() >= 1 && target.size(0) == rows)
          << name(stage) << ": the target has "
          << (target.defined() && target.dim() >= 1 ? std::to_string(target.size(0)) + " rows" : "no rows")
          << ", the input on the first stage " << rows;
      COHORT_CHECK_AS(ConfigError, bool(loss_fn)) << name(stage) << ": train_step needs a loss function";
    }

    std::vector<MicroBatch> mbs(size_t(m), MicroBatch{});
    double loss_sum = 0;
    c10::ScalarType loss_dtype = c10::ScalarType::Float;
    live = 0;
    live_bytes = 0;
    for (const PipelineAction& a : pipeline_actions(options.schedule, stages, stage, m)) {
      const int j = a.micro_batch;
      MicroBatch& mb = mbs[size_t(j)];
      switch (a.kind) {
        case Kind::recv_activation: {
          mb.input = recv(stage - 1, {.kind = MessageKind::activation, .micro_batch = j, .micro_batches = m});
          if (mb.input.is_floating_point()) mb.input.requires_grad_(true);
          break;
        }
        case Kind::forward: {
          if (first) mb.input = input.narrow(0, start_of(rows, m, j), rows_of(rows, m, j));
          if (last) mb.target = target.narrow(0, start_of(rows, m, j), rows_of(rows, m, j));
          forward(mb, j, m, &loss_fn);
          if (last) {
            loss_sum += double(rows_of(rows, m, j)) / double(rows) * mb.output.detach().item<double>();
            loss_dtype = mb.output.scalar_type();
          } else {
            check_activation(mb.output, j);
          }
          hold(mb);
          break;
        }
        case Kind::send_activation:
          send(mb.output, stage + 1, MessageKind::activation, j, m, rows);
          break;
        case Kind::recv_gradient: {
          mb.input_grad = recv(stage + 1, {.kind = MessageKind::gradient,
                                           .micro_batch = j,
                                           .micro_batches = m,
                                           .dtype = mb.output.scalar_type(),
                                           .shape = mb.output.sizes().vec()});
          break;
        }
        case Kind::backward: {
          if (options.recompute_activations) recompute(mb, j, m, &loss_fn);
          if (last) {
            const double share = double(rows_of(rows, m, j)) / double(rows);
            if (mb.output.requires_grad()) (mb.output * share).backward();
          } else if (mb.output.requires_grad()) {
            mb.output.backward(mb.input_grad);
          }
          at::Tensor g;
          if (!first) {
            g = mb.input.grad();
            if (!g.defined()) g = at::zeros_like(mb.input);  // the stage ignored its input
          }
          release(mb);
          mb.output = at::Tensor();
          mb.target = at::Tensor();
          mb.rng.reset();
          mb.input_grad = g;  // now the gradient to send back
          if (first) mb.input = at::Tensor();
          break;
        }
        case Kind::send_gradient:
          send(mb.input_grad, stage - 1, MessageKind::gradient, j, m, rows);
          mb.input = at::Tensor();
          mb.input_grad = at::Tensor();
          break;
      }
    }
    ++stats.steps;
    // The last stage's loss, to every stage: value and dtype.
    std::array<double, 2> wire{loss_sum, double(int(loss_dtype))};
    if (stages > 1) pp->broadcast(BufferView{wire.data(), 2, DType::f64}, stages - 1);
    return at::scalar_tensor(wire[0], at::TensorOptions().dtype(c10::ScalarType(int(wire[1]))));
  }

  at::Tensor forward_only(const at::Tensor& input) {
    const int64_t rows = agree_batch_rows(input, "forward");
    COHORT_CHECK_AS(ConfigError, rows >= 1) << name(stage) << ": forward of an empty batch";
    const int m = int(std::min<int64_t>(options.micro_batches, rows));
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> outputs;
    MicroBatch mb;
    for (const PipelineAction& a : forward_actions(stages, stage, m)) {
      const int j = a.micro_batch;
      switch (a.kind) {
        case Kind::recv_activation:
          mb.input = recv(stage - 1, {.kind = MessageKind::activation, .micro_batch = j, .micro_batches = m});
          break;
        case Kind::forward:
          if (stage == 0) mb.input = input.narrow(0, start_of(rows, m, j), rows_of(rows, m, j));
          mb.output = run_stage(mb, j, m);
          if (stage == stages - 1) outputs.push_back(mb.output);
          break;
        case Kind::send_activation:
          send(mb.output, stage + 1, MessageKind::activation, j, m, rows);
          break;
        default:
          COHORT_THROW(Error) << "forward-only schedule has a " << to_string(a);
      }
    }
    at::Tensor out = stage == stages - 1 ? at::cat(outputs) : at::Tensor();
    return stages > 1 ? broadcast_tensor(*pp, out, stages - 1) : out;
  }
};

Pipeline::Pipeline(StageFn stage, std::shared_ptr<comm::Communicator> pp, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  COHORT_CHECK_AS(ConfigError, bool(stage)) << "Pipeline needs a stage";
  COHORT_CHECK_AS(ConfigError, pp != nullptr) << "Pipeline needs the pipeline-group communicator";
  COHORT_CHECK_AS(ConfigError, options.micro_batches >= 1)
      << "PipelineOptions::micro_batches must be at least 1, got " << options.micro_batches;
  impl_->fn = std::move(stage);
  impl_->pp = std::move(pp);
  impl_->options = options;
  impl_->stage = impl_->pp->rank();
  impl_->stages = impl_->pp->size();
  impl_->stats.stage = impl_->stage;
  impl_->stats.stages = impl_->stages;
  // Stages that disagree on the schedule would exchange messages in
  // different orders: refuse up front, naming who differs.
  const int n = impl_->stages;
  std::array<int32_t, 3> mine{options.micro_batches, int32_t(options.schedule),
                              int32_t(options.recompute_activations)};
  std::vector<int32_t> all(3 * size_t(n));
  impl_->pp->allgather(BufferView{mine.data(), 3, DType::i32}, BufferView{all.data(), all.size(), DType::i32});
  for (int s = 0; s < n; ++s) {
    const int32_t* o = &all[3 * size_t(s)];
    COHORT_CHECK_AS(ConfigError, o[0] == all[0] && o[1] == all[1])
        << "pipeline stages disagree on their options: stage 0 has micro_batches=" << all[0]
        << " schedule=" << schedule_name(Schedule(all[1])) << ", stage " << s << " micro_batches=" << o[0]
        << " schedule=" << schedule_name(Schedule(o[1]));
  }
}

Pipeline::~Pipeline() = default;

int Pipeline::stage() const { return impl_->stage; }
int Pipeline::stages() const { return impl_->stages; }
const PipelineOptions& Pipeline::options() const { return impl_->options; }

at::Tensor Pipeline::train_step(const at::Tensor& input, const at::Tensor& target, const LossFn& loss_fn) {
  return impl_->train_step(input, target, loss_fn);
}

at::Tensor Pipeline::forward(const at::Tensor& input) { return impl_->forward_only(input); }

Pipeline::Stats Pipeline::stats() const { return impl_->stats; }

void Pipeline::reset_stats() {
  const Stats fresh{.stages = impl_->stages, .stage = impl_->stage};
  impl_->stats = fresh;
}

}  // namespace cohort
