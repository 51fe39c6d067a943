#include "cohort/torch/privacy/clipped_gradients.h"

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "cohort/common/check.h"
#include "cohort/torch/core/module_state.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/privacy/layer_kernel.h"
#include "cohort/torch/privacy/per_sample.h"
#include "cohort/torch/privacy/per_sample_module.h"

namespace cohort::privacy {
namespace {

namespace nn = torch::nn;
using torch::autograd::Edge;
using torch::autograd::Node;

// A layer whose per-sample quantities come from its kernel, or from its own
// micro-batches.
struct Watched {
  std::string name;                                        // its path in the model ("block1.conv", a Sequential's "3")
  nn::Module* layer;                                       // the layer (a PerSample's module)
  std::function<torch::Tensor(const torch::Tensor&)> run;  // the layer alone, never recorded
  std::optional<LayerKernel> kernel;
  std::string no_kernel;                 // why not, when there is none
  std::vector<torch::Tensor> trainable;  // what the kernel's sums are, in order
  std::vector<std::string> trainable_names;
};

struct Plan {
  // A plain Sequential is stepped through: the step records its layers
  // (those in `stepped`) itself.
  nn::SequentialImpl* sequential = nullptr;
  std::unordered_set<const nn::Module*> stepped;
  std::vector<Watched> watched;
  std::unordered_map<const nn::Module*, size_t> index;  // what records (a PerSample, a stepped layer) -> watched
  std::unordered_set<const nn::Module*> wrappers;       // every PerSample of the model
  std::vector<torch::Tensor> outside;                   // trainable parameters outside every watched layer
  std::vector<std::string> outside_names;
};

bool is_per_sample(const nn::Module& m) { return dynamic_cast<const PerSampleImpl*>(&m) != nullptr; }

bool holds_per_sample(const nn::Module& m) {
  if (is_per_sample(m)) return true;
  for (const auto& child : m.modules(/*include_self=*/false))
    if (is_per_sample(*child)) return true;
  return false;
}

// `layer`, reached as `key` (what records its calls), watched when it has
// trainable parameters (returns whether it is).
bool watch(Plan& plan, const std::string& name, const nn::Module* key, nn::Module& layer,
           std::function<torch::Tensor(const torch::Tensor&)> run) {
  Watched w{.name = name, .layer = &layer, .run = std::move(run)};
  size_t all = 0;
  for (const auto& item : layer.named_parameters(/*recurse=*/true)) {
    ++all;
    if (!item.value().requires_grad()) continue;
    w.trainable.push_back(item.value());
    w.trainable_names.push_back(item.key());
  }
  if (w.trainable.empty()) return false;
  // A layer's kernel covers all of its parameters; with some frozen, its
  // own micro-batches cover the rest.
  if (w.trainable.size() == all) w.kernel = kernel_of(layer, &w.no_kernel);
  else w.no_kernel = "frozen parameters";
  if (!w.kernel) {
    for (const auto& m : layer.modules(/*include_self=*/true))
      COHORT_CHECK_AS(ConfigError, !splits_over_ranks(*m))
          << "private: layer " << name << " (" << layer.name() << ") holds the tensor-parallel layer " << m->name()
          << " but takes its own micro-batches (" << w.no_kernel
          << "): its per-sample norms would miss the other ranks' shards; wrap the tensor-parallel layer itself";
  }
  plan.index.emplace(key, plan.watched.size());
  plan.watched.push_back(std::move(w));
  return true;
}

// The PerSamples in `module`'s tree (names under `prefix`).
void watch_wrappers(Plan& plan, const std::string& prefix, nn::Module& module) {
  for (const auto& item : module.named_modules(prefix, /*include_self=*/true)) {
    auto* wrapper = dynamic_cast<PerSampleImpl*>(item.value().get());
    if (wrapper == nullptr) continue;
    const std::string name = item.key().empty() ? "<root>" : item.key();
    for (const auto& inner : wrapper->module().named_modules(name + ".module", /*include_self=*/true))
      COHORT_CHECK_AS(ConfigError, !is_per_sample(*inner.value()))
          << "private: cohort::PerSample '" << inner.key() << "' is inside cohort::PerSample '" << name
          << "': PerSamples do not nest; wrap either the block or its layers";
    plan.wrappers.insert(wrapper);
    watch(plan, name, wrapper, wrapper->module(), [wrapper](const torch::Tensor& x) { return wrapper->run(x); });
  }
}

// Which layers `module`'s forward is watched at, and the trainable
// parameters outside them. ConfigError for what the private step refuses.
Plan plan_of(nn::Module& module) {
  Plan plan;
  if (typeid(module) == typeid(nn::SequentialImpl)) {
    plan.sequential = &dynamic_cast<nn::SequentialImpl&>(module);
    size_t i = 0;
    for (nn::AnyModule& child : *plan.sequential) {
      nn::Module& layer = *child.ptr();
      const std::string name = std::to_string(i++);
      if (holds_per_sample(layer)) {
        watch_wrappers(plan, name, layer);  // they record themselves
        continue;
      }
      if (watch(plan, name, &layer, layer, [&child](const torch::Tensor& x) { return child.forward(x); }))
        plan.stepped.insert(&layer);
    }
  } else {
    watch_wrappers(plan, "", module);
  }
  std::unordered_map<const c10::TensorImpl*, size_t> owner;
  for (size_t w = 0; w < plan.watched.size(); ++w)
    for (const torch::Tensor& p : plan.watched[w].trainable) {
      const auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), w);
      COHORT_CHECK_AS(ConfigError, fresh)
          << "private: a parameter is in two watched layers, " << plan.watched[it->second].name << " and "
          << plan.watched[w].name << " (tied weights): wrap one layer in cohort::PerSample and call it wherever "
          << "the weights are used";
    }
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad() || owner.count(item.value().unsafeGetTensorImpl())) continue;
    plan.outside.push_back(item.value());
    plan.outside_names.push_back(item.key());
  }
  // Micro-batches of the whole model would clip each rank's shard of a
  // tensor-parallel layer by its own norm.
  std::unordered_set<const c10::TensorImpl*> outside;
  for (const torch::Tensor& p : plan.outside) outside.insert(p.unsafeGetTensorImpl());
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    if (!splits_over_ranks(*item.value())) continue;
    for (const torch::Tensor& p : item.value()->parameters(/*recurse=*/false)) {
      if (!outside.count(p.unsafeGetTensorImpl())) continue;
      std::ostringstream where;
      if (plan.sequential) where << "is nested in a layer of the Sequential";
      else where << "is in a model that is not a torch::nn::Sequential (" << module.name() << ")";
      COHORT_THROW(ConfigError) << "private: the tensor-parallel layer '" << item.key() << "' (" << item.value()->name()
                                << ") " << where.str() << " and outside every cohort::PerSample: micro-batches of "
                                << "the whole model would clip each rank's shard by its own norm; wrap it in "
                                << "cohort::PerSample so that its kernel runs";
    }
  }
  return plan;
}

GradientPath path_of(const Plan& plan) {
  if (plan.watched.empty()) return GradientPath::micro_batches;
  return plan.outside.empty() ? GradientPath::kernels : GradientPath::mixed;
}

// "a, b, c and 4 more".
std::string listed(const std::vector<std::string>& names, size_t most = 6) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > most) out << " and " << names.size() - most << " more";
  return out.str();
}

// The model's forward: a plain Sequential's layers one by one, the stepped
// ones recorded; any other model's own forward (its PerSamples record
// themselves while `recorder` is this thread's).
torch::Tensor run_model(const Plan& plan, nn::Module& module, const ForwardFn& forward, const torch::Tensor& input,
                        LayerRecorder* recorder) {
  if (plan.sequential == nullptr) return forward(module, input);
  torch::Tensor x = input;
  for (nn::AnyModule& layer : *plan.sequential) {
    const nn::Module* key = layer.ptr().get();
    if (recorder == nullptr || !plan.stepped.count(key)) {
      x = layer.forward(x);
      continue;
    }
    const uint64_t first = at::sequence_number::peek();
    torch::Tensor y = layer.forward(x);
    recorder->record(*key, x, y, {first, at::sequence_number::peek()});
    x = std::move(y);
  }
  return x;
}

// One call of a watched layer, as the forward made it.
struct Call {
  torch::Tensor input;        // detached
  Edge output;                // the output's place in the graph; none when it needs no gradient
  torch::Tensor zeros;        // the output's shape and type, for a call no gradient reaches
  NodeRange nodes;            // the autograd nodes the call made
  int64_t input_version = 0;  // the input's version counter then
};

// The forward's record of the watched layers' calls.
class Trace final : public LayerRecorder {
 public:
  Trace(const Plan& plan, int64_t rows) : plan_(plan), rows_(rows), calls_(plan.watched.size()) {}

  void record(const nn::Module& layer, const at::Tensor& input, const at::Tensor& output, NodeRange nodes) override {
    const auto it = plan_.index.find(&layer);
    if (it == plan_.index.end()) {
      // A PerSample of the model without trainable parameters only runs.
      COHORT_CHECK_AS(ConfigError, plan_.wrappers.count(&layer))
          << "private: a cohort::PerSample (of " << dynamic_cast<const PerSampleImpl&>(layer).module().name()
          << ") ran in the forward but is not part of the model being trained: its parameters would get no "
             "per-sample gradient";
      return;
    }
    const Watched& w = plan_.watched[it->second];
    COHORT_CHECK_AS(ConfigError,
                    input.dim() >= 1 && input.size(0) == rows_ && output.dim() >= 1 && output.size(0) == rows_)
        << "private: watched layer '" << w.name << "' (" << w.layer->name() << ") ran on an input of shape "
        << input.sizes() << " and gave " << output.sizes() << " in a step of " << rows_
        << " samples: per-sample gradients need the samples along dim 0 (Linear takes [B, T, in]; do not fold "
           "positions into the batch)";
    calls_[it->second].push_back(
        {.input = input.detach(),
         .output = output.requires_grad() ? torch::autograd::impl::gradient_edge(output) : Edge(),
         .zeros = torch::zeros({}, output.options()).expand(output.sizes()),
         .nodes = nodes,
         .input_version = input._version()});
  }

  // The kernels read the inputs as the layers took them: one modified in
  // place since (x.relu_() after the layer ran) is refused. (Autograd
  // would notice only where it runs the layer's backward.)
  void check_inputs_unchanged() const {
    for (size_t w = 0; w < calls_.size(); ++w)
      for (const Call& call : calls_[w])
        COHORT_CHECK_AS(ConfigError, call.input._version() == call.input_version)
            << "private: the input of watched layer '" << plan_.watched[w].name
            << "' was modified in place after the layer ran: its per-sample kernel would read the modified "
               "values; use the out-of-place operation";
  }

  const std::vector<Call>& calls(size_t watched) const { return calls_[watched]; }

  // Every autograd node that reads a watched layer's parameter must belong
  // to one of that layer's calls: a use elsewhere (tied weights used by
  // hand, the wrapped module called around its PerSample) is a gradient
  // the kernels would not see, and clipping would not bound.
  void check_parameter_uses(const torch::Tensor& root) const {
    std::unordered_map<const Node*, std::pair<size_t, size_t>> accumulators;  // -> (watched, parameter)
    for (size_t w = 0; w < plan_.watched.size(); ++w)
      for (size_t k = 0; k < plan_.watched[w].trainable.size(); ++k)
        if (const auto node = torch::autograd::impl::try_get_grad_accumulator(plan_.watched[w].trainable[k]))
          accumulators.emplace(node.get(), std::make_pair(w, k));
    if (!root.grad_fn()) return;
    std::vector<const Node*> stack{root.grad_fn().get()};
    std::unordered_set<const Node*> seen{stack.front()};
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges()) {
        if (!edge.function) continue;
        const auto reads = accumulators.find(edge.function.get());
        if (reads == accumulators.end()) {
          if (seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
          continue;
        }
        const auto [w, k] = reads->second;
        bool inside = false;
        for (const Call& call : calls_[w]) inside = inside || call.nodes.holds(node->sequence_nr());
        const Watched& watched = plan_.watched[w];
        COHORT_CHECK_AS(ConfigError, inside)
            << "private: parameter '" << watched.trainable_names[k] << "' of watched layer '" << watched.name
            << "' is also used outside that layer's forward (by " << node->name()
            << "): its per-sample gradient would miss that use. Call the cohort::PerSample itself wherever the "
               "weights are used, or leave the layer unwrapped";
      }
    }
  }

  // The gradient of `root` with respect to every call's output, in order of
  // the watched layers and their calls (undefined where none reaches).
  std::vector<std::vector<torch::Tensor>> output_gradients(const torch::Tensor& root) const {
    torch::autograd::edge_list edges;
    for (const auto& calls : calls_)
      for (const Call& call : calls)
        if (call.output.is_valid()) edges.push_back(call.output);
    std::vector<std::vector<torch::Tensor>> grads(calls_.size());
    torch::autograd::variable_list found;
    // The edges, not the output tensors: a layer's output modified in place
    // afterwards (relu_) has a new place in the graph, and autograd::grad
    // would give the gradient of the modified tensor.
    if (!edges.empty() && root.requires_grad())
      found = torch::autograd::Engine::get_default_engine().execute(
          {torch::autograd::impl::gradient_edge(root)}, {torch::ones_like(root)}, /*keep_graph=*/false,
          /*create_graph=*/false, /*accumulate_grad=*/false, edges);
    size_t next = 0;
    for (size_t w = 0; w < calls_.size(); ++w)
      for (const Call& call : calls_[w]) {
        torch::Tensor g = call.output.is_valid() && !found.empty() ? found.at(next++) : torch::Tensor();
        grads[w].push_back(g.defined() ? g : call.zeros.contiguous());
      }
    return grads;
  }

 private:
  const Plan& plan_;
  int64_t rows_;
  std::vector<std::vector<Call>> calls_;
};

// From per-sample gradients stacked per parameter.
LayerGradients stacked(const std::vector<std::vector<torch::Tensor>>& per_parameter) {
  std::vector<torch::Tensor> stacks;
  for (const auto& samples : per_parameter) stacks.push_back(torch::stack(samples));
  return materialised_gradients(std::move(stacks));
}

// A watched layer without a kernel (or one that cannot join its calls): its
// own micro-batches. Sample i's gradient of the layer's parameters is that
// of sum over the calls c of <layer(x_ci), g_ci>, with g_ci the sample's
// output gradient from the batched backward, so only this layer runs again
// per sample, not the whole model. Materialises [B, parameter] per
// trainable parameter of the layer.
LayerGradients layer_micro_batches(const Watched& w, const std::vector<LayerCall>& calls, int64_t rows) {
  torch::AutoGradMode enable(true);
  std::vector<std::vector<torch::Tensor>> per_parameter(w.trainable.size());
  for (int64_t i = 0; i < rows; ++i) {
    torch::Tensor dot;
    for (const LayerCall& call : calls) {
      const torch::Tensor term = (w.run(call.input.narrow(0, i, 1)) * call.grad_output.narrow(0, i, 1)).sum();
      dot = dot.defined() ? dot + term : term;
    }
    std::vector<torch::Tensor> grads(w.trainable.size());
    if (dot.requires_grad())
      grads = torch::autograd::grad({dot}, w.trainable, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    for (size_t k = 0; k < w.trainable.size(); ++k)
      per_parameter[k].push_back(grads[k].defined() ? grads[k] : torch::zeros_like(w.trainable[k]));
  }
  return stacked(per_parameter);
}

LayerGradients watched_gradients(const Watched& w, const std::vector<LayerCall>& calls, int64_t rows) {
  if (calls.empty()) {
    // Not run this step: no gradient.
    std::vector<std::vector<torch::Tensor>> zeros(w.trainable.size());
    for (size_t k = 0; k < w.trainable.size(); ++k) zeros[k].assign(size_t(rows), torch::zeros_like(w.trainable[k]));
    return stacked(zeros);
  }
  if (w.kernel && calls.size() == 1) return w.kernel->gradients(calls.front().input, calls.front().grad_output);
  if (w.kernel && w.kernel->join) {
    const LayerCall joined = w.kernel->join(calls);
    return w.kernel->gradients(joined.input, joined.grad_output);
  }
  return layer_micro_batches(w, calls, rows);
}

// The parameters outside every watched layer: micro-batches of the whole
// model, restricted to them (autograd runs only the part of each backward
// they need).
LayerGradients outside_gradients(const Plan& plan, nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                                 const Batch& batch) {
  torch::AutoGradMode enable(true);
  std::vector<std::vector<torch::Tensor>> per_parameter(plan.outside.size());
  for (int64_t i = 0; i < batch.rows(); ++i) {
    const torch::Tensor sample_loss =
        loss(run_model(plan, module, forward, batch.input.narrow(0, i, 1), nullptr), batch.target.narrow(0, i, 1));
    std::vector<torch::Tensor> grads(plan.outside.size());
    if (sample_loss.requires_grad())
      grads = torch::autograd::grad({sample_loss}, plan.outside, {}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < plan.outside.size(); ++k)
      per_parameter[k].push_back(grads[k].defined() ? grads[k] : torch::zeros_like(plan.outside[k]));
  }
  return stacked(per_parameter);
}

ClippedSum by_watched_layers(const Plan& plan, nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                             const Batch& batch, double max_grad_norm, Clipping clipping) {
  const int64_t rows = batch.rows();
  Trace trace(plan, rows);
  torch::Tensor output;
  {
    RecordingScope recording(&trace);
    output = run_model(plan, module, forward, batch.input, &trace);
  }
  const torch::Tensor mean = loss(output, batch.target);
  ClippedSum result{.loss_sum = mean.item<double>() * double(rows), .output = output.detach()};
  const torch::Tensor sum = mean * double(rows);
  trace.check_inputs_unchanged();
  trace.check_parameter_uses(sum);
  const auto grad_outputs = trace.output_gradients(sum);

  torch::NoGradGuard no_grad;
  // Each watched layer's per-sample quantities, then the outside
  // parameters' as one more layer.
  std::vector<LayerGradients> layers;
  std::vector<const std::vector<torch::Tensor>*> parameters;
  for (size_t w = 0; w < plan.watched.size(); ++w) {
    std::vector<LayerCall> calls;
    for (size_t c = 0; c < trace.calls(w).size(); ++c) calls.push_back({trace.calls(w)[c].input, grad_outputs[w][c]});
    layers.push_back(watched_gradients(plan.watched[w], calls, rows));
    parameters.push_back(&plan.watched[w].trainable);
  }
  if (!plan.outside.empty()) {
    layers.push_back(outside_gradients(plan, module, forward, loss, batch));
    parameters.push_back(&plan.outside);
  }
  torch::Tensor total = torch::zeros({rows}, torch::kFloat64);
  for (const LayerGradients& layer : layers) total += layer.squared_norms.to(torch::kFloat64);
  result.sample_norms = total.sqrt();
  const torch::Tensor flat_factors = clip_factors(total, max_grad_norm);
  // Per layer: C / sqrt(L) each, so that the whole gradient's norm is still
  // at most C (the sensitivity the noise is calibrated to).
  const double layer_norm = max_grad_norm / std::sqrt(double(std::max<size_t>(1, layers.size())));
  for (size_t i = 0; i < layers.size(); ++i) {
    const torch::Tensor& norms = layers[i].squared_norms;
    const torch::Tensor factors =
        clipping == Clipping::flat ? flat_factors : clip_factors(norms.to(torch::kFloat64), layer_norm);
    const std::vector<torch::Tensor> sums = layers[i].scaled_sum(factors.to(norms.scalar_type()));
    const std::vector<torch::Tensor>& params = *parameters[i];
    COHORT_CHECK_EQ(sums.size(), params.size())
        << "per-sample kernel of " << (i < plan.watched.size() ? plan.watched[i].name : "the outside parameters");
    for (size_t k = 0; k < sums.size(); ++k)
      params[k].mutable_grad() = sums[k].to(params[k].scalar_type()).reshape(params[k].sizes());
  }
  return result;
}

ClippedSum by_micro_batches(nn::Module& module, const ForwardFn& forward, const LossFn& loss, const Batch& batch,
                            double max_grad_norm) {
  const int64_t rows = batch.rows();
  const auto parameters = module.parameters();
  for (const auto& p : parameters)
    if (p.requires_grad()) p.mutable_grad() = torch::zeros_like(p);
  ClippedSum result;
  result.sample_norms = clipped_sum_by_microbatches(
      parameters, rows,
      [&](int64_t i) { return loss(forward(module, batch.input.narrow(0, i, 1)), batch.target.narrow(0, i, 1)); },
      max_grad_norm);
  torch::NoGradGuard no_grad;
  result.output = forward(module, batch.input);
  result.loss_sum = loss(result.output, batch.target).item<double>() * double(rows);
  return result;
}

}  // namespace

GradientPath gradient_path(nn::Module& module) { return path_of(plan_of(module)); }

std::string gradient_path_name(GradientPath path) {
  switch (path) {
    case GradientPath::kernels: return "kernels";
    case GradientPath::micro_batches: return "micro_batches";
    case GradientPath::mixed: return "mixed";
  }
  return "unknown";
}

std::string describe_gradient_path(nn::Module& module) {
  const Plan plan = plan_of(module);
  if (plan.watched.empty())
    return "whole-model micro-batches: " + module.name() +
           " is not a torch::nn::Sequential and has no cohort::PerSample layers (wrap its layers for the kernels)";
  std::vector<std::string> parts, fallbacks;
  size_t kernels = 0;
  for (const Watched& w : plan.watched) {
    if (w.kernel) ++kernels;
    else fallbacks.push_back(w.name + " (" + w.no_kernel + ")");
  }
  if (kernels > 0) parts.push_back("kernels: " + std::to_string(kernels) + (kernels == 1 ? " layer" : " layers"));
  if (!fallbacks.empty()) parts.push_back("layer micro-batches: " + listed(fallbacks));
  if (!plan.outside.empty()) {
    // What to wrap: the modules that hold them, unless one holds
    // PerSamples already (they would nest) or is the model itself: then
    // the parameters have to move into a layer of their own.
    const auto modules = module.named_modules();
    std::vector<std::string> owners, own;
    for (const std::string& name : plan.outside_names) {
      const size_t dot = name.rfind('.');
      const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
      if (owner.empty() || !modules.contains(owner) || holds_per_sample(*modules[owner])) own.push_back(name);
      else if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    std::vector<std::string> advice;
    if (!owners.empty()) advice.push_back("wrap " + listed(owners) + " in cohort::PerSample");
    if (!own.empty()) advice.push_back("move " + listed(own) + " into a layer wrapped in cohort::PerSample");
    const size_t n = plan.outside.size();
    parts.push_back("whole-model micro-batches (a forward per sample) for " + std::to_string(n) +
                    " unwrapped parameter" + (n == 1 ? "" : "s") + ": " + listed(plan.outside_names) + " (" +
                    listed(advice) + ")");
  }
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : "; ") + part;
  return out;
}

ClippedSum clipped_gradient_sum(nn::Module& module, const ForwardFn& forward, const LossFn& loss,
                                const Batch& batch, double max_grad_norm, Clipping clipping) {
  COHORT_CHECK_AS(ConfigError, max_grad_norm > 0) << "max grad norm must be positive, got " << max_grad_norm;
  COHORT_CHECK(batch.rows() > 0 && batch.target.defined()) << "clipped_gradient_sum needs rows with targets";
  const Plan plan = plan_of(module);
  if (!plan.watched.empty()) return by_watched_layers(plan, module, forward, loss, batch, max_grad_norm, clipping);
  COHORT_CHECK_AS(ConfigError, clipping == Clipping::flat)
      << "per-layer clipping needs per-layer kernels: the model (" << module.name()
      << ") is not a torch::nn::Sequential and has no cohort::PerSample layers";
  return by_micro_batches(module, forward, loss, batch, max_grad_norm);
}

}  // namespace cohort::privacy
