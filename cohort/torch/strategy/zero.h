// zero: data parallelism with ZeRO's sharding (data_parallel/zero_optimizer.h),
// one replica per rank as multi_worker. stage=1 splits the optimizer state
// over the ranks, stage=2 also the gradients, stage=3 also the parameters;
// every rank starts from rank
// 0's parameters. The program's optimizer factory is called once, over this
// rank's blocks of the flat parameters, and must be per element (SGD, Adam,
// AdamW, Adagrad, RMSprop). Uneven and empty shares of a step's rows are
// weighted as in multi_worker. A bfloat16 or half model computes and
// communicates in its precision and is stepped through float32 master
// copies of this rank's blocks.
//
// Stage 3 (FSDP's FULL_SHARD) needs to know the model's units: a
// torch::nn::Sequential's layers it groups into units of about unit_bytes
// (the auto-wrap policy by size); any other model marks its units by
// wrapping them in cohort::ShardedUnit (data_parallel/sharded_unit.h), the
// parameters outside every unit being one more (the root, gathered for the
// whole step). Each unit's full parameters exist only while it computes
// (forward, and again in backward), with the next unit's gather started
// meanwhile. Between steps module()'s parameters have
// no storage: predict(), save() and gather_parameters() gather the whole
// model (collective), which stays until the next step.
//
// Checkpoints, two forms:
// - save() / load() (fit()'s callbacks): the full model and the optimizer
//   state joined back per parameter in one archive, the form multi_worker
//   and one_device save (every rank holds the whole state while it exists);
//   load() takes this rank's blocks of any of them.
// - save_sharded() / load_sharded() (checkpoint/sharded_checkpoint.h): every
//   rank writes only its own blocks and their state, streamed to its own
//   file; the checkpoint loads into zero at any world size and stage, and
//   into a replicated model (load_sharded_checkpoint(): DDP, one device).
//   export_consolidated() writes the whole state as one shard, rank 0
//   writing it one bucket at a time, so no rank ever holds all of it.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/elastic_shards.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/data_parallel/sharded_unit.h"
#include "cohort/torch/data_parallel/zero_optimizer.h"
#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/strategy/rank_strategy.h"

namespace cohort {

struct ZeroStrategyOptions {
  int stage = 1;                             // 1, 2 or 3
  int64_t bucket_bytes = int64_t(25) << 20;  // stages 1, 2: flat buckets of about this many bytes
  int64_t unit_bytes = int64_t(1) << 20;     // stage 3: a unit closes at this many bytes of parameters
  // Hybrid sharding: blocks split within groups of this many consecutive
  // ranks (a host's, as cohortrun numbers them), replicated across groups.
  // 0: one group of all ranks. Needs cohort::init()'s world (engine null).
  int shard_group = 0;
  engine::Engine* engine = nullptr;          // null: cohort::init()'s (started if needed)
};

class ZeroStrategy : public RankStrategy, public ElasticTraining {
 public:
  explicit ZeroStrategy(ZeroStrategyOptions options = {});
  ~ZeroStrategy() override;

  // ShardedCheckpoints (fit()'s ModelCheckpoint and BackupAndRestore save
  // zero through them). Collective: a sharded checkpoint in `dir`, one shard
  // per rank; returns the save's id.
  bool saves_sharded() const override { return true; }
  std::string save_sharded(const std::string& dir, const TrainingState& state = {}) override;
  // Collective: the state of any sharded checkpoint (any world size, any
  // zero stage, or a replicated model's) into this rank's blocks.
  TrainingState load_sharded(const std::string& dir, const std::string& id = "") override;
  // Collective: a sharded checkpoint of one shard holding the whole state,
  // written by rank 0 a bucket at a time. Returns the most bytes of
  // gathered state any rank held at once (one bucket's).
  int64_t export_consolidated(const std::string& dir, const TrainingState& state = {});

  // Stage 3 frees each unit's full parameters when it is done with them, so
  // between steps module()'s parameters have no storage behind them (reading
  // them is undefined, as FSDP's resharded ones). Collective: gathers the
  // whole model, which then stays until the next step (as for predict()).
  // Stages 1 and 2 over a Sequential finish a step's allgather during the
  // next forward: this waits for it (not collective). predict(), save(),
  // load() and the sharded checkpoints call it themselves.
  void gather_parameters();

  // ElasticTraining (any stage, without shard_group, on cohort::init()'s
  // world): every commit keeps each rank's blocks and a copy of another
  // rank's (checkpoint/elastic_shards.h), never the whole state on one
  // rank; after a change the new world's blocks are built again (rejoin();
  // stage 3 from placeholders, its parameters having no storage between
  // steps) and filled from the last commit, resharded to the new size.
  void rejoin() override;
  ElasticShards* elastic_shards() override;

  const ZeroOptimizer& sharded() const;
  const ZeroStrategyOptions& options() const { return options_; }
  ZeroMemory memory() const { return sharded().memory(); }

 protected:
  std::string do_spec() const override;
  void do_prepare() override;  // collective
  // The program's module, its parameters current (stages 1 and 2 finish a
  // step's allgather first; stage 3: see gather_parameters()).
  torch::nn::Module& do_module() override;
  // The optimizer over this rank's blocks (its param groups carry the lr).
  torch::optim::Optimizer& do_optimizer() override;
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override;
  at::Tensor do_predict(const at::Tensor& input) override;
  // Collective: the full model and the consolidated optimizer, in the form
  // every replicated strategy saves (core/replicated_state.h), so the
  // checkpoint loads into them too, and into zero at any world size.
  void do_save(torch::serialize::OutputArchive& archive) override;
  void do_load(torch::serialize::InputArchive& archive) override;
  ElasticTraining* do_elastic() override { return !own_engine_ && options_.shard_group == 0 ? this : nullptr; }

 private:
  // prepare()'s work after its checks (rejoin() does it again);
  // sync_parameters: rank 0's parameters broadcast first (not where an
  // elastic restore follows).
  void build(bool sync_parameters);
  // This rank's records of a sharded checkpoint, and all of them read back.
  void write_own_records(ShardWriter& out, const TrainingState& state);
  TrainingState read_records(const ShardedCheckpoint& in);
  std::vector<std::vector<size_t>> plan_units(torch::nn::Module& module);
  std::vector<std::vector<size_t>> plan_wrapped_units(torch::nn::Module& module);

  at::Tensor forward_by_units(const at::Tensor* input);
  at::Tensor forward_by_layers(const at::Tensor& input);

  ZeroStrategyOptions options_;
  TrainingModel training_;          // model(), with the forward a step runs (by units, by layers)
  std::vector<std::string> names_;  // zero_'s parameters' names (the module's trainable ones), in its order
  // Hybrid: the mesh whose tp axis is the shard groups and dp the replicas
  // (declared before zero_, so that it outlives it).
  std::unique_ptr<Mesh> groups_;
  std::vector<torch::nn::AnyModule*> layers_;            // a Sequential's layers
  std::vector<std::vector<size_t>> layer_buckets_;       // stages 1, 2: the buckets each layer's parameters are in
  std::vector<std::pair<size_t, size_t>> unit_layers_;  // stage 3: each unit's layers [first, end)
  // Stage 3 over a model of the program's own: its ShardedUnits (bound to
  // zero_ through the schedule), and whether unit 0 is the root (the
  // parameters outside them).
  std::vector<ShardedUnitImpl*> wrapped_;
  std::shared_ptr<ShardedUnitImpl::Schedule> schedule_;
  bool root_unit_ = false;
  bool evaluating_ = false;                             // stage 3: gathered for predict() until the next step
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<ElasticShardFiles> elastic_;  // an elastic job's commits (elastic_shards())
};

}  // namespace cohort
