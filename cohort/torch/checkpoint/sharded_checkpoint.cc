#include "cohort/torch/checkpoint/sharded_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <filesystem>
#include <random>
#include <sstream>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/checkpoint/checkpoint_file.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/element_state.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;

// The element types a record may have (what index() accepts back).
bool known_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf || t == at::kLong ||
         t == at::kInt || t == at::kByte || t == at::kChar || t == at::kBool;
}

constexpr char kManifestHeader[] = "cohort sharded checkpoint 1";
constexpr uint32_t kMaxName = 4096;
constexpr uint8_t kMaxDims = 16;

std::string id_text(uint64_t id) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string shard_file(int rank, int shards, uint64_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.", rank, shards);
  return name + id_text(id);
}

// The id a shard file belongs to ("shard-...-of-....<id>"), or empty.
std::string id_of_shard_file(const std::string& file) {
  if (!file.starts_with("shard-")) return "";
  const size_t dot = file.rfind('.');
  return dot == std::string::npos ? "" : file.substr(dot + 1);
}

struct Manifest {
  std::string id;
  std::vector<std::string> shards;
};

Manifest read_manifest(const std::string& path) {
  CheckpointFileReader file(path, CheckpointKind::manifest);
  std::string text(file.payload_bytes(), '\0');
  file.read(0, text.data(), text.size());
  std::istringstream in(text);
  std::string line, word;
  Manifest m;
  size_t count = 0;
  const bool ok = std::getline(in, line) && line == kManifestHeader && (in >> word >> m.id) && word == "save" &&
                  (in >> word >> count) && word == "shards" && count > 0 && count <= 1u << 20;
  COHORT_CHECK_AS(ConfigError, ok) << "sharded checkpoint manifest " << path << " is unusable: unexpected contents";
  for (size_t i = 0; i < count && in >> word; ++i) m.shards.push_back(word);
  COHORT_CHECK_AS(ConfigError, m.shards.size() == count)
      << "sharded checkpoint manifest " << path << " is unusable: it lists " << m.shards.size() << " of " << count
      << " shards";
  return m;
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// Rank `rank` of `size`'s elements of a tensor of `n`: [n r / size, n (r + 1) / size).
std::pair<int64_t, int64_t> slice_of(int64_t n, int rank, int size) {
  return {n * rank / size, n * (rank + 1) / size};
}

// A trainable parameter, when ZeRO writes those itself.
bool zeros_own(ModelParameters which, const at::Tensor& p) {
  return which == ModelParameters::frozen && p.requires_grad();
}

at::Tensor flat_slice(const at::Tensor& t, std::pair<int64_t, int64_t> s) {
  return t.reshape(-1).narrow(0, s.first, s.second - s.first);
}

}  // namespace

// ---- writing ----

ShardWriter::ShardWriter() = default;
ShardWriter::ShardWriter(const std::string& path)
    : file_(std::make_unique<CheckpointFileWriter>(path, CheckpointKind::shard)) {}
ShardWriter::~ShardWriter() = default;

void ShardWriter::add(const std::string& name, c10::IntArrayRef shape, int64_t offset, const at::Tensor& piece) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  COHORT_CHECK(!name.empty() && name.size() <= kMaxName && shape.size() <= kMaxDims)
      << "sharded checkpoint: record '" << name << "' of " << shape.size() << " dimensions";
  COHORT_CHECK(offset >= 0 && offset + piece.numel() <= numel)
      << "sharded checkpoint: a piece of '" << name << "' at " << offset << " with " << piece.numel()
      << " elements does not fit its shape " << shape;
  COHORT_CHECK_AS(ConfigError, known_dtype(piece.scalar_type()))
      << "sharded checkpoint: '" << name << "' is of dtype " << piece.scalar_type() << ", which it cannot store";
  if (!file_) return;
  try {
    append(name, shape, offset, piece.contiguous());
  } catch (...) {
    failed_ = std::current_exception();
    file_.reset();  // removes the temporary file; later adds do nothing
  }
}

void ShardWriter::append(const std::string& name, c10::IntArrayRef shape, int64_t offset, const at::Tensor& data) {
  const auto name_bytes = uint32_t(name.size());
  const auto dtype = int8_t(data.scalar_type());
  const auto dims = uint8_t(shape.size());
  const int64_t count = data.numel();
  file_->append(&name_bytes, sizeof name_bytes);
  file_->append(name.data(), name.size());
  file_->append(&dtype, sizeof dtype);
  file_->append(&dims, sizeof dims);
  file_->append(shape.data(), shape.size() * sizeof(int64_t));
  file_->append(&offset, sizeof offset);
  file_->append(&count, sizeof count);
  file_->append(data.data_ptr(), size_t(count) * data.element_size());
}

void ShardWriter::add_bytes(const std::string& name, const std::vector<char>& bytes) {
  // from_blob wants a mutable pointer; add() only reads it.
  add(name, {int64_t(bytes.size())}, 0,
      at::from_blob(const_cast<char*>(bytes.data()), {int64_t(bytes.size())}, at::kByte));
}

void ShardWriter::commit() {
  if (failed_) std::rethrow_exception(failed_);
  if (file_) file_->commit({.keep_previous = false});
}

std::string shard_path(const std::string& dir, int rank, int shards, uint64_t id) {
  return (fs::path(dir) / shard_file(rank, shards, id)).string();
}

void write_manifest(const std::string& dir, int shards, uint64_t id) {
  std::ostringstream text;
  text << kManifestHeader << "\nsave " << id_text(id) << "\nshards " << shards << "\n";
  for (int r = 0; r < shards; ++r) text << shard_file(r, shards, id) << "\n";
  CheckpointFileWriter file((fs::path(dir) / "manifest").string(), CheckpointKind::manifest);
  const std::string bytes = text.str();
  file.append(bytes.data(), bytes.size());
  file.commit({.keep_previous = true});
}

std::string save_sharded(const std::string& dir, const std::function<void(ShardWriter&)>& fill,
                         const ShardedSaveOptions& options) {
  engine::Engine& eng = resolve_engine(options.engine);
  const int rank = eng.rank(), shards = options.single_writer ? 1 : eng.size();
  // A fresh id per save: its shards never overwrite the save in force.
  at::Tensor id = at::zeros({1}, at::kLong);
  if (rank == 0) id.fill_(int64_t(std::random_device{}() >> 1) << 31 ^ int64_t(std::random_device{}()));
  const auto save_id = uint64_t(broadcast(id, {.root = 0, .engine = &eng}).item<int64_t>());
  const bool writes = !options.single_writer || rank == 0;
  std::exception_ptr error;
  // A writer that cannot even start (no directory, no space) keeps nothing
  // but `fill` still runs: its collectives must go on with the other ranks.
  std::unique_ptr<ShardWriter> writer;
  try {
    if (writes) {
      fs::create_directories(dir);
      writer = std::make_unique<ShardWriter>(shard_path(dir, rank, shards, save_id));
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (!writer) writer = std::make_unique<ShardWriter>();
  try {
    fill(*writer);
    if (!error) writer->commit();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  writer.reset();
  // Every shard written, or no manifest: the save in force stays.
  const bool all = allreduce(at::tensor({error ? 0L : 1L}), {.op = ReduceOp::min, .engine = &eng}).item<int64_t>();
  if (error) std::rethrow_exception(error);
  COHORT_CHECK_AS(Error, all) << "sharded checkpoint " << dir
                              << ": another rank could not write its shard (its error says why); the previous save "
                                 "stays in force";
  std::string failure;
  if (rank == 0) {
    try {
      write_manifest(dir, shards, save_id);
      const std::string manifest = (fs::path(dir) / "manifest").string();
      // Shards of saves older than the two manifests are garbage now.
      std::string previous;
      try {
        previous = read_manifest(previous_checkpoint_path(manifest)).id;
      } catch (const ConfigError&) {
      }
      const std::string current = id_text(save_id);
      for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string file_id = id_of_shard_file(entry.path().filename().string());
        // (A crashed save's temporary files end in ".tmp.<pid>.<n>": they go too.)
        if (!file_id.empty() && file_id != current && file_id != previous) fs::remove(entry.path());
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const bool done = broadcast(at::tensor({failure.empty() ? 1L : 0L}), {.root = 0, .engine = &eng}).item<int64_t>();
  COHORT_CHECK_AS(Error, done) << "sharded checkpoint " << dir << ": rank 0 could not write the manifest"
                               << (failure.empty() ? "" : ": " + failure);
  return id_text(save_id);
}

// ---- reading ----

struct ShardedCheckpoint::Piece {
  size_t shard;
  uint64_t position;  // of its elements in the shard's payload
  int64_t offset, count;
};

struct ShardedCheckpoint::Record {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::vector<Piece> pieces;
};

ShardedCheckpoint::ShardedCheckpoint(const std::string& dir, const std::string& id) : dir_(dir) {
  const std::string current = (fs::path(dir) / "manifest").string(), previous = previous_checkpoint_path(current);
  COHORT_CHECK_AS(ConfigError, fs::exists(current) || fs::exists(previous))
      << "no sharded checkpoint in " << dir << " (it has no manifest)";
  std::optional<Manifest> m;
  std::string why;
  for (const std::string& path : {current, previous}) {
    if (!fs::exists(path)) continue;
    try {
      Manifest candidate = read_manifest(path);
      // With an id, the save of that id (a crash between a sharded save and
      // the file that names it leaves it the one before).
      if (id.empty() || candidate.id == id) {
        if (path == previous)
          COHORT_LOG(warn) << "sharded checkpoint " << dir << ": using " << path << " (" << why << ")";
        m = std::move(candidate);
        break;
      }
      why = "its manifest names save " + candidate.id;
    } catch (const ConfigError& e) {
      if (!id.empty() || !fs::exists(previous) || path == previous) throw;
      why = e.what();
    }
  }
  COHORT_CHECK_AS(ConfigError, m.has_value())
      << "sharded checkpoint " << dir << " no longer holds save " << id << " (it keeps the last two saves)";
  for (const std::string& shard : m->shards) {
    COHORT_CHECK_AS(ConfigError, id_of_shard_file(shard) == m->id && shard.find('/') == std::string::npos)
        << "sharded checkpoint " << dir << " is unusable: its manifest names an unexpected shard " << shard;
    const fs::path path = fs::path(dir) / shard;
    COHORT_CHECK_AS(ConfigError, fs::exists(path))
        << "sharded checkpoint " << dir << " is incomplete: shard " << shard << " is missing";
    files_.push_back(std::make_unique<CheckpointFileReader>(path.string(), CheckpointKind::shard));
    index(files_.size() - 1);
  }
}

ShardedCheckpoint::~ShardedCheckpoint() = default;

void ShardedCheckpoint::index(size_t shard) {
  const CheckpointFileReader& file = *files_[shard];
  const std::string unusable = "sharded checkpoint shard " + file.path() + " is unusable";
  uint64_t at = 0;
  auto take = [&](void* out, size_t n) {
    file.read(at, out, n);
    at += n;
  };
  while (at < file.payload_bytes()) {
    uint32_t name_bytes = 0;
    take(&name_bytes, sizeof name_bytes);
    COHORT_CHECK_AS(ConfigError, name_bytes > 0 && name_bytes <= kMaxName)
        << unusable << ": a record name of " << name_bytes << " bytes";
    std::string name(name_bytes, '\0');
    take(name.data(), name.size());
    int8_t dtype = 0;
    uint8_t dims = 0;
    take(&dtype, sizeof dtype);
    take(&dims, sizeof dims);
    COHORT_CHECK_AS(ConfigError, dims <= kMaxDims) << unusable << ": record '" << name << "' of " << int(dims)
                                                    << " dimensions";
    std::vector<int64_t> shape(dims);
    take(shape.data(), shape.size() * sizeof(int64_t));
    int64_t offset = 0, count = 0, numel = 1;
    take(&offset, sizeof offset);
    take(&count, sizeof count);
    for (int64_t d : shape) {
      COHORT_CHECK_AS(ConfigError, d >= 0 && (d == 0 || numel <= (int64_t(1) << 50) / d))
          << unusable << ": record '" << name << "' has an impossible shape";
      numel *= d;
    }
    const auto type = static_cast<at::ScalarType>(dtype);
    COHORT_CHECK_AS(ConfigError, known_dtype(type))
        << unusable << ": record '" << name << "' has an unknown dtype " << int(dtype);
    COHORT_CHECK_AS(ConfigError, offset >= 0 && count >= 0 && count <= numel && offset <= numel - count)
        << unusable << ": record '" << name << "' holds elements [" << offset << ", " << offset + count
        << ") of a tensor of " << numel;
    Record& r = records_[name];
    if (r.pieces.empty()) {
      r.dtype = type, r.shape = shape, r.numel = numel;
    } else {
      COHORT_CHECK_AS(ConfigError, r.dtype == type && r.shape == shape)
          << "sharded checkpoint " << dir_ << " is unusable: its shards disagree on the dtype or shape of '" << name
          << "'";
    }
    r.pieces.push_back({shard, at, offset, count});
    at += uint64_t(count) * c10::elementSize(type);
    COHORT_CHECK_AS(ConfigError, at <= file.payload_bytes())
        << unusable << ": record '" << name << "' runs past the end of the payload";
  }
}

bool ShardedCheckpoint::contains(const std::string& name) const { return records_.count(name) > 0; }

const ShardedCheckpoint::Record& ShardedCheckpoint::record(const std::string& name) const {
  const auto it = records_.find(name);
  COHORT_CHECK_AS(ConfigError, it != records_.end()) << "sharded checkpoint " << dir_ << " has no '" << name << "'";
  return it->second;
}

std::vector<int64_t> ShardedCheckpoint::shape(const std::string& name) const { return record(name).shape; }

std::vector<const ShardedCheckpoint::Piece*> ShardedCheckpoint::pieces_of(const Record& r, int64_t offset,
                                                                           int64_t count, std::string& problem) const {
  std::vector<const Piece*> in;
  for (const Piece& p : r.pieces)
    if (std::max(offset, p.offset) < std::min(offset + count, p.offset + p.count)) in.push_back(&p);
  std::sort(in.begin(), in.end(), [](const Piece* a, const Piece* b) { return a->offset < b->offset; });
  // They must tile the range: each starts where the previous one ended.
  int64_t at = offset;
  for (const Piece* p : in) {
    const int64_t start = std::max(p->offset, offset);
    if (start > at) break;
    if (start < at) {
      problem = "two pieces overlap at element " + std::to_string(start);
      return in;
    }
    at = p->offset + p->count;
  }
  if (at < offset + count)
    problem = "no shard holds elements from " + std::to_string(at) + " (of [" + std::to_string(offset) + ", " +
              std::to_string(offset + count) + "))";
  return in;
}

bool ShardedCheckpoint::covers(const std::string& name, int64_t offset, int64_t count) const {
  const auto it = records_.find(name);
  if (it == records_.end() || offset < 0 || count < 0 || offset + count > it->second.numel) return false;
  std::string problem;
  pieces_of(it->second, offset, count, problem);
  return problem.empty();
}

void ShardedCheckpoint::read_into(const std::string& name, int64_t offset, const at::Tensor& out) const {
  const Record& r = record(name);
  COHORT_CHECK(out.is_contiguous() && out.device().is_cpu()) << "sharded checkpoint: read into a contiguous CPU tensor";
  const int64_t n = out.numel();
  COHORT_CHECK_AS(ConfigError, offset >= 0 && offset + n <= r.numel)
      << "sharded checkpoint " << dir_ << ": elements [" << offset << ", " << offset + n << ") of '" << name
      << "' asked for, it has " << r.numel;
  std::string problem;
  const std::vector<const Piece*> pieces = pieces_of(r, offset, n, problem);
  COHORT_CHECK_AS(ConfigError, problem.empty())
      << "sharded checkpoint " << dir_ << " is unusable: its pieces of '" << name << "': " << problem;
  const at::Tensor flat = out.view({n});
  const size_t size = c10::elementSize(r.dtype);
  for (const Piece* p : pieces) {
    const int64_t lo = std::max(offset, p->offset), hi = std::min(offset + n, p->offset + p->count);
    const uint64_t from = p->position + uint64_t(lo - p->offset) * size;
    at::Tensor into = flat.narrow(0, lo - offset, hi - lo);
    if (out.scalar_type() == r.dtype) {
      files_[p->shard]->read(from, into.data_ptr(), size_t(hi - lo) * size);
    } else {
      at::Tensor saved = at::empty({hi - lo}, r.dtype);
      files_[p->shard]->read(from, saved.data_ptr(), size_t(hi - lo) * size);
      into.copy_(saved);
    }
  }
}

at::Tensor ShardedCheckpoint::read(const std::string& name) const {
  const Record& r = record(name);
  at::Tensor t = at::empty(r.shape, r.dtype);
  read_into(name, 0, t);
  return t;
}

std::vector<char> ShardedCheckpoint::read_bytes(const std::string& name) const {
  const at::Tensor t = read(name);
  COHORT_CHECK_AS(ConfigError, t.scalar_type() == at::kByte && t.dim() == 1)
      << "sharded checkpoint " << dir_ << ": '" << name << "' is not bytes";
  const char* p = static_cast<const char*>(t.data_ptr());
  return {p, p + t.numel()};
}

// ---- a model's records ----

void write_model_records(ShardWriter& out, const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                         const TrainingState& state, int rank, int size, ModelParameters which) {
  if (rank == 0) {
    out.add_bytes("@optimizer", bytes_of(optimizer_type_name(optimizer)));
    COHORT_CHECK(!optimizer.param_groups().empty()) << "sharded checkpoint: an optimizer without param groups";
    torch::serialize::OutputArchive options;
    optimizer.param_groups().front().options().serialize(options);
    out.add_bytes("@options", archive_bytes(options));
    int64_t seed_bits;
    std::memcpy(&seed_bits, &state.seed, sizeof seed_bits);
    out.add("@training_state", {4}, 0, at::tensor({state.epoch, state.batch, state.step, seed_bits}, at::kLong));
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (zeros_own(which, item.value())) continue;
    const at::Tensor& p = item.value();
    const auto slice = slice_of(p.numel(), rank, size);
    out.add(parameter_record(item.key()), p.sizes(), slice.first, flat_slice(p, slice));
    if (std::optional<ElementState> s = element_state_of(optimizer, p)) {
      for (auto& field : s->fields)
        if (field.second.defined()) field.second = flat_slice(field.second, slice);
      write_state_piece(out, item.key(), p.sizes(), slice.first, *s);
    }
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    const auto slice = slice_of(item.value().numel(), rank, size);
    out.add(buffer_record(item.key()), item.value().sizes(), slice.first, flat_slice(item.value(), slice));
  }
}

TrainingState read_model_records(const ShardedCheckpoint& in, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, ModelParameters which) {
  const std::string where = "sharded checkpoint " + in.dir();
  const std::vector<char> type = in.read_bytes("@optimizer");
  COHORT_CHECK_AS(ConfigError, std::string(type.begin(), type.end()) == optimizer_type_name(optimizer))
      << where << " holds the state of a " << std::string(type.begin(), type.end()) << ", this job's optimizer is a "
      << optimizer_type_name(optimizer);
  // Everything checked before anything changes.
  auto check = [&](const std::string& what, const std::string& record, const at::Tensor& t) {
    COHORT_CHECK_AS(ConfigError, in.contains(record)) << where << " has no " << what;
    COHORT_CHECK_AS(ConfigError, in.shape(record) == t.sizes().vec())
        << where << ": " << what << " is " << c10::IntArrayRef(in.shape(record)) << " there, " << t.sizes()
        << " in this model";
    COHORT_CHECK_AS(ConfigError, in.covers(record, 0, t.numel()))
        << where << " is unusable: its shards do not hold all of " << what;
  };
  const std::vector<std::string> fields = element_state_fields(optimizer);
  for (const auto& item : module.named_parameters(true)) {
    if (zeros_own(which, item.value())) continue;
    check("parameter '" + item.key() + "'", parameter_record(item.key()), item.value());
    for (const std::string& field : fields)
      if (in.contains(state_record(item.key(), field)))
        check("the optimizer's " + field + " of '" + item.key() + "'", state_record(item.key(), field), item.value());
  }
  for (const auto& item : module.named_buffers(true))
    check("buffer '" + item.key() + "'", buffer_record(item.key()), item.value());
  const at::Tensor state = in.read("@training_state");
  COHORT_CHECK_AS(ConfigError, state.scalar_type() == at::kLong && state.numel() == 4)
      << where << ": unexpected training state record";
  torch::serialize::InputArchive options;
  const std::vector<char> option_bytes = in.read_bytes("@options");
  try {
    options.load_from(option_bytes.data(), option_bytes.size());
  } catch (const c10::Error& e) {
    COHORT_THROW(ConfigError) << where << ": unreadable optimizer options: " << e.what_without_backtrace();
  }

  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& record, at::Tensor& t) {
    if (t.is_contiguous()) {
      in.read_into(record, 0, t);
    } else {
      at::Tensor tmp = at::empty(t.sizes(), t.options());
      in.read_into(record, 0, tmp);
      t.copy_(tmp);
    }
  };
  for (auto& item : module.named_parameters(true)) {
    if (zeros_own(which, item.value())) continue;
    at::Tensor& p = item.value();
    load(parameter_record(item.key()), p);
    if (const std::optional<ElementState> s = read_state(in, item.key(), fields, p))
      set_element_state(optimizer, p, *s);
    else
      erase_element_state(optimizer, p);
  }
  for (auto& item : module.named_buffers(true)) load(buffer_record(item.key()), item.value());
  for (auto& group : optimizer.param_groups()) group.options().serialize(options);
  const int64_t* v = state.data_ptr<int64_t>();
  TrainingState result{.epoch = v[0], .batch = v[1], .step = v[2]};
  std::memcpy(&result.seed, &v[3], sizeof result.seed);
  return result;
}

std::string save_sharded_checkpoint(const std::string& dir, const torch::nn::Module& module,
                                    const torch::optim::Optimizer& optimizer, const TrainingState& state,
                                    const ShardedSaveOptions& options) {
  engine::Engine& eng = resolve_engine(options.engine);
  const int size = options.single_writer ? 1 : eng.size(), rank = options.single_writer ? 0 : eng.rank();
  return save_sharded(
      dir, [&](ShardWriter& out) { write_model_records(out, module, optimizer, state, rank, size); }, options);
}

TrainingState load_sharded_checkpoint(const std::string& dir, torch::nn::Module& module,
                                      torch::optim::Optimizer& optimizer, const std::string& id) {
  return read_model_records(ShardedCheckpoint(dir, id), module, optimizer);
}

}  // namespace cohort
