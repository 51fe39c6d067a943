#include "cohort/torch/data_parallel/replica_agreement.h"

#include <torch/torch.h>

#include <cstring>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"
#include "cohort/torch/core/tensor_view.h"

namespace cohort {
namespace {

// splitmix64's finaliser: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Words at a time (a step that is cheap next to a training step); the tail
// bytes are packed into one last word. Position-dependent: a permutation of
// the words changes the hash.
uint64_t hash_bytes(const std::byte* data, size_t bytes, uint64_t seed) {
  uint64_t h = mix(seed ^ bytes);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = mix(h ^ w) + i;
  }
  if (i < bytes) {
    uint64_t w = 0;
    std::memcpy(&w, data + i, bytes - i);
    h = mix(h ^ w ^ 0xff);
  }
  return h;
}

}  // namespace

int64_t agreement_check_interval(int64_t every_steps) {
  const int64_t n = every_steps < 0 ? tunables::agreement_check_steps() : every_steps;
  COHORT_CHECK_AS(ConfigError, n >= 0) << "COHORT_AGREEMENT_CHECK_STEPS must be 0 (off) or positive, got " << n;
  return n;
}

bool agreement_check_due(int64_t step, int64_t interval) {
  return interval > 0 && (step == 1 || step % interval == 0);
}

std::vector<int64_t> parameter_fingerprints(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> out;
  out.reserve(params.size());
  for (const at::Tensor& p : params) {
    const at::Tensor t = p.detach().contiguous();
    uint64_t seed = uint64_t(t.scalar_type()) + 0x9e3779b97f4a7c15ULL;
    for (int64_t d : t.sizes()) seed = mix(seed ^ uint64_t(d));
    out.push_back(int64_t(hash_bytes(static_cast<const std::byte*>(t.data_ptr()), t.nbytes(), seed)));
  }
  return out;
}

AgreementCheck start_agreement_check(engine::Engine& engine, const std::string& op_name,
                                     const std::vector<at::Tensor>& params, int64_t step) {
  AgreementCheck check;
  check.step = step;
  check.mine = parameter_fingerprints(params);
  check.gathered = std::make_shared<at::Tensor>();
  const size_t n = check.mine.size();
  engine::AllgatherOptions o;
  o.row_elements = std::max<size_t>(n, 1);
  o.allocate = [out = check.gathered](size_t total, std::span<const size_t>) {
    *out = at::empty({int64_t(total)}, at::kLong);
    return BufferView{out->data_ptr(), total, DType::i64};
  };
  // The handle's allgather reads `mine` until it completes: the caller keeps
  // the check (and so the vector) until then.
  const BufferView v{check.mine.data(), n, DType::i64};
  check.handle = op_name.empty() ? engine.submit_ordered_allgather(v, std::move(o))
                                 : engine.allgather_async(op_name, v, std::move(o));
  return check;
}

void check_agreement(const AgreementCheck& check, const std::string& who, const std::vector<std::string>& names) {
  const size_t n = check.mine.size();
  if (n == 0) return;
  const at::Tensor& all = *check.gathered;
  const int64_t ranks = all.numel() / int64_t(n);
  COHORT_CHECK_AS(MismatchError, all.numel() == ranks * int64_t(n))
      << who << ": the ranks hold different numbers of parameters (" << all.numel() << " fingerprints for " << n
      << " per rank)";
  const int64_t* h = all.data_ptr<int64_t>();
  std::vector<int> differing;
  size_t first = n;
  for (int64_t r = 1; r < ranks; ++r) {
    for (size_t k = 0; k < n; ++k) {
      if (h[r * int64_t(n) + int64_t(k)] == h[k]) continue;
      differing.push_back(int(r));
      first = std::min(first, k);
      break;
    }
  }
  if (differing.empty()) return;
  std::ostringstream os;
  os << who << ": the replicas' parameters differ at step " << check.step << ": ";
  if (first < names.size()) os << "'" << names[first] << "'";
  else os << "parameter " << first;
  os << " on rank" << (differing.size() > 1 ? "s" : "");
  for (size_t i = 0; i < differing.size(); ++i) os << (i ? ", " : " ") << differing[i];
  os << " differs from rank 0's. Replicas must start equal: call cohort::broadcast_parameters(model, 0) and "
        "cohort::broadcast_optimizer_state(optimizer, 0) after building them (DistributedDataParallel does it at "
        "construction), and change parameters only through the wrapped optimizer "
        "(COHORT_AGREEMENT_CHECK_STEPS sets how often this is checked; 0 turns it off)";
  COHORT_THROW(MismatchError) << os.str();
}

std::exception_ptr step_count_error(std::exception_ptr error, const std::string& who, int rank, int64_t step) {
  try {
    std::rethrow_exception(error);
  } catch (const engine::PeerShutDownError& e) {
    if (e.rank() == rank) return error;  // this rank's own shutdown
    std::ostringstream os;
    os << who << ": rank " << rank << " is in step " << step << " but rank " << e.rank()
       << " shut down before it: the ranks ran different numbers of steps (a rank with fewer batches pairs each "
          "later step with another rank's earlier one, and the last steps find no partner). Give every rank the "
          "same number of batches (DistributedSampler with drop_last, or Model::fit), or have a rank that runs "
          "out of data call cohort::join() until every rank has (engine: "
       << e.what() << ")";
    return std::make_exception_ptr(MismatchError(os.str()));
  } catch (...) {
    return error;
  }
}

}  // namespace cohort
