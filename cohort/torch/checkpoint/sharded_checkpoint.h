// Sharded checkpoints: every rank writes its own part of the training state,
// and any world size reads it back (resharding), into ZeRO's blocks or into
// a whole replicated model.
//
// Layout of a checkpoint directory:
//   <dir>/manifest                  the save in force: its id and its shards
//   <dir>/manifest.prev             the save before it (kept, loadable)
//   <dir>/shard-<r>-of-<n>.<id>     rank r's records, one file per rank
// Each file is framed as checkpoint_frame.h says (magic, version, kind,
// payload size and CRC-32s). A shard's payload is a stream of records, each
// a piece of a named tensor (core/tensor_pieces.h): the name, the dtype, the
// whole tensor's shape, the piece's first element and element count, then
// its elements (raw, little-endian). Files are written and read as streams:
// neither side ever holds more than the piece in hand.
//
// Saving (collective): every rank writes its shard under a fresh id, all
// ranks agree that every shard was written, then rank 0 writes the manifest
// (the previous one kept as manifest.prev) and removes shards of older
// saves. A crash or error at any point leaves the last complete save in
// force. Loading verifies every shard's checksums and that the pieces
// cover what is asked; anything wrong is a ConfigError naming the file and
// what is wrong (missing, truncated, corrupt, from another save, does not
// fit the model).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/core/tensor_pieces.h"

namespace cohort {

class CheckpointFileWriter;
class CheckpointFileReader;

// One shard file, written as a stream. A writer made without a path keeps
// nothing (the ranks that take part in a save without writing). A failed
// write (a full disk) is kept, not thrown, and every later add() does
// nothing: the caller's collectives between adds go on in step with the
// other ranks; commit() throws it.
class ShardWriter : public TensorPieceWriter {
 public:
  ShardWriter();
  explicit ShardWriter(const std::string& path);
  ~ShardWriter() override;
  void add(const std::string& name, c10::IntArrayRef shape, int64_t offset, const at::Tensor& piece) override;
  void add_bytes(const std::string& name, const std::vector<char>& bytes);
  void commit();

 private:
  void append(const std::string& name, c10::IntArrayRef shape, int64_t offset, const at::Tensor& data);

  std::unique_ptr<CheckpointFileWriter> file_;
  std::exception_ptr failed_;
};

// A complete save, opened and verified: every shard's records indexed.
class ShardedCheckpoint : public TensorPieceReader {
 public:
  // The save in force in `dir` (the manifest, or the one before it when the
  // manifest is missing or damaged: a crash while it was replaced), or with
  // `id` the save of that id (the one in force or the one before it).
  // ConfigError when there is no such complete save or a shard is damaged.
  explicit ShardedCheckpoint(const std::string& dir, const std::string& id = "");
  ~ShardedCheckpoint() override;

  const std::string& dir() const { return dir_; }
  int shards() const { return int(files_.size()); }  // the world size that saved it
  bool contains(const std::string& name) const override;
  std::vector<int64_t> shape(const std::string& name) const override;
  bool covers(const std::string& name, int64_t offset, int64_t count) const override;
  void read_into(const std::string& name, int64_t offset, const at::Tensor& out) const override;
  at::Tensor read(const std::string& name) const;  // the whole tensor, shaped, in its saved dtype
  std::vector<char> read_bytes(const std::string& name) const;

 private:
  struct Piece;
  struct Record;
  void index(size_t shard);
  const Record& record(const std::string& name) const;
  // The pieces of `r` within [offset, offset + count), in order; empty
  // `problem` when they hold every element exactly once.
  std::vector<const Piece*> pieces_of(const Record& r, int64_t offset, int64_t count, std::string& problem) const;

  std::string dir_;
  std::vector<std::unique_ptr<CheckpointFileReader>> files_;
  std::map<std::string, Record> records_;
};

struct ShardedSaveOptions {
  // Only rank 0 writes, one shard holding everything (the consolidated
  // form); the other ranks take part in the collectives.
  bool single_writer = false;
  engine::Engine* engine = nullptr;  // null: the thread's current engine
};

// Collective: a save of `dir` (created if needed) whose shards `fill`
// writes, one per rank (one in all with single_writer). Returns its id.
std::string save_sharded(const std::string& dir, const std::function<void(ShardWriter&)>& fill,
                         const ShardedSaveOptions& options = {});

// A save put together by one process from shard files it holds (an
// elastic job's commit, copied between members: core/elastic_state.h).
// Where shard `rank` of `shards` of save `id` is in `dir`, and, once every
// shard file is there, the manifest that makes the save in force (not
// collective; ShardedCheckpoint then opens it).
std::string shard_path(const std::string& dir, int rank, int shards, uint64_t id);
void write_manifest(const std::string& dir, int shards, uint64_t id);

// Which parameters a model's records include: all of them, or only those
// that do not require grad (ZeRO writes the trainable ones as its blocks).
enum class ModelParameters { all, frozen };

// The records of a whole model: buffers, the parameters `which` says (and
// the optimizer state of each), the optimizer's type and group options, and
// the TrainingState. `rank` of `size` writes its 1/size of every tensor
// (rank 0 the rest).
void write_model_records(ShardWriter& out, const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                         const TrainingState& state, int rank, int size,
                         ModelParameters which = ModelParameters::all);
// Their counterpart: loads into `module` and `optimizer` in place what
// write_model_records() wrote (with `all`, every parameter and its
// optimizer state, from whatever wrote them, ZeRO's blocks included).
// ConfigError when the checkpoint does not fit (another optimizer type, a
// missing parameter or buffer, another shape, pieces missing); nothing is
// changed then.
TrainingState read_model_records(const ShardedCheckpoint& in, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, ModelParameters which = ModelParameters::all);

// Collective: the sharded save of a replicated model (DDP, one device per
// rank: every rank holds the whole state): each rank writes 1/size of it.
std::string save_sharded_checkpoint(const std::string& dir, const torch::nn::Module& module,
                                    const torch::optim::Optimizer& optimizer, const TrainingState& state = {},
                                    const ShardedSaveOptions& options = {});
// Not collective: the whole state from any sharded checkpoint (any world
// size; ZeRO's at any stage, or a replicated model's) into `module` and
// `optimizer` in place.
TrainingState load_sharded_checkpoint(const std::string& dir, torch::nn::Module& module,
                                      torch::optim::Optimizer& optimizer, const std::string& id = "");

}  // namespace cohort
