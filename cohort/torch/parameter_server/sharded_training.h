// ShardedTraining: a LibTorch module trained through parameter servers.
//
// Binds a module to a ps::Worker: every dense parameter becomes a variable
// on the servers (its rows sharded, its optimizer on the servers) and every
// PsEmbedding submodule a row-sparse table; a step is then
//
//   training.begin_step();     // pull the parameters this step may read
//   loss(forward(x)).backward();
//   training.end_step();       // push gradients (rows for the tables), commit
//
// Three ways to treat the dense parameters (the tables are always on the
// servers, their optimizer there):
//   on the servers      the default: pulled each step, the server's
//                       optimizer (JobOptions::optimizer) updates them
//   summation (BytePS)  optimizer=sum: gradients are pushed and the mean over
//                       the step's workers pulled back (push_pull); the
//                       program's local optimizer steps
//   hybrid              hybrid=1: gradients are averaged among the workers by
//                       allreduce on `worker_engine` and the local optimizer
//                       steps; only the tables use the servers
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/parameter_server/options.h"
#include "cohort/parameter_server/worker.h"
#include "cohort/torch/parameter_server/ps_embedding.h"

namespace cohort {

enum class DenseMode { servers, summation, hybrid };

struct ShardedTrainingOptions {
  DenseMode dense = DenseMode::servers;
  // The workers' group: hybrid allreduces on it; in summation mode, with it
  // the workers start from worker 0's parameters by broadcast, without it
  // by a pull at the first step (only right for workers starting at step 0).
  engine::Engine* worker_engine = nullptr;
  // Whether the workers start from worker 0's parameters (by broadcast on
  // worker_engine) in summation and hybrid modes; false for a worker joining
  // an elastic job, which takes the members' state from ElasticState (and
  // the members make no such broadcast for it).
  bool sync_from_chief = true;
};

class ShardedTraining {
 public:
  // Declares the module's variables on the servers (collective over the
  // workers: the same module structure everywhere; worker 0's values win)
  // and joins; `load_dir`, when set, fills them from a checkpoint first.
  ShardedTraining(ps::Worker& worker, torch::nn::Module& module, ShardedTrainingOptions options,
                  const std::string& load_dir = "");

  void begin_step();
  // `local`: the program's optimizer, stepped in summation and hybrid modes.
  void end_step(torch::optim::Optimizer* local);

  // Pulls the dense parameters now (evaluation after training, say).
  void pull();
  int64_t clock() const { return worker_.clock(); }
  DenseMode dense_mode() const { return options_.dense; }
  // The workers' group of a new world (an elastic job's rejoin).
  void set_worker_engine(engine::Engine* engine) { options_.worker_engine = engine; }
  ps::Worker& worker() { return worker_; }
  // Variables on the servers: the dense parameters (empty when hybrid),
  // then the tables.
  const std::vector<std::string>& dense_names() const { return dense_names_; }
  const std::vector<PsEmbedding>& tables() const { return tables_; }

 private:
  ps::Worker& worker_;
  ShardedTrainingOptions options_;
  std::vector<at::Tensor> dense_;  // the module's parameters held on the servers
  std::vector<std::string> dense_names_;
  std::vector<at::Tensor> local_;  // hybrid: parameters allreduced among workers
  std::vector<PsEmbedding> tables_;
  bool pulled_once_ = false;
};

// The DType of a floating tensor (f32 or f64); ConfigError otherwise.
DType ps_dtype(const at::Tensor& t);

}  // namespace cohort
