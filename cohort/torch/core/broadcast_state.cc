#include "cohort/torch/core/broadcast_state.h"

#include <torch/torch.h>

#include <exception>
#include <vector>

#include "cohort/common/check.h"
#include "cohort/torch/core/optimizer_archive.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {
namespace {

void check_root(engine::Engine& eng, int root, const char* what) {
  COHORT_CHECK_AS(ConfigError, root >= 0 && root < eng.size())
      << what << ": root " << root << " is not a rank of this group of " << eng.size();
}

}  // namespace

void broadcast_parameters(const torch::OrderedDict<std::string, at::Tensor>& tensors, int root,
                          engine::Engine* engine, const std::string& name_prefix) {
  engine::Engine& eng = resolve_engine(engine);
  check_root(eng, root, "broadcast_parameters");
  torch::NoGradGuard no_grad;
  struct Pending {
    at::Tensor target, buffer;
    engine::Handle handle;
  };
  std::vector<Pending> pending;
  std::exception_ptr error;
  // Everything is submitted before anything is waited for, so the engine
  // fuses the many small tensors into few broadcasts.
  try {
    for (const auto& item : tensors) {
      const at::Tensor& t = item.value();
      const std::string name = name_prefix + "/" + item.key();
      check_tensor(t, "broadcast of '" + item.key() + "'");
      Pending p{t, t.contiguous(), {}};
      engine::BroadcastOptions o;
      o.shape = t.sizes().vec();
      p.handle = eng.broadcast_async(name, view_of(p.buffer, name), root, std::move(o));
      pending.push_back(std::move(p));
    }
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& p : pending) {
    try {
      p.handle.wait();
      if (!p.buffer.is_same(p.target)) p.target.copy_(p.buffer);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void broadcast_parameters(torch::nn::Module& module, int root, engine::Engine* engine) {
  torch::OrderedDict<std::string, at::Tensor> all;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) all.insert("param/" + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) all.insert("buffer/" + item.key(), item.value());
  broadcast_parameters(all, root, engine);
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root, engine::Engine* engine) {
  engine::Engine& eng = resolve_engine(engine);
  check_root(eng, root, "broadcast_optimizer_state");
  // The optimizer's own serialisation carries every kind of state without
  // cohort knowing each optimizer's fields (optimizer_archive.h adds the
  // group options); root's bytes are loaded on the other ranks.
  std::vector<char> bytes;
  if (eng.rank() == root) {
    torch::serialize::OutputArchive archive;
    save_optimizer(optimizer, archive);
    archive.save_to([&bytes](const void* data, size_t n) {
      bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
      return n;
    });
  }
  int64_t length = static_cast<int64_t>(bytes.size());
  engine::BroadcastOptions o;
  eng.broadcast_async("broadcast_optimizer_state/length", BufferView{&length, 1, DType::i64}, root, o).wait();
  bytes.resize(size_t(length));
  eng.broadcast_async("broadcast_optimizer_state/bytes", BufferView{bytes.data(), bytes.size(), DType::u8}, root, o)
      .wait();
  if (eng.rank() == root) return;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  try {
    load_optimizer(optimizer, archive);
  } catch (const MismatchError& e) {
    COHORT_THROW(MismatchError) << "broadcast_optimizer_state: rank " << eng.rank()
                                << " cannot load the optimizer state of rank " << root << ": " << e.what();
  } catch (const c10::Error& e) {
    COHORT_THROW(MismatchError) << "broadcast_optimizer_state: rank " << eng.rank()
                                << " cannot load the optimizer state of rank " << root
                                << " (do both build the same optimizer over the same parameters?): "
                                << e.what_without_backtrace();
  }
}

}  // namespace cohort
