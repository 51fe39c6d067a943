// ModelCheckpoint: saves the model and optimizer to one file, atomically and
// by the chief only, every epoch, every `every_steps` steps, or only when a
// monitored metric improves (save_best_only). The file is a cohort
// checkpoint (checkpoint/checkpoint.h): load_checkpoint() and
// resume_from_checkpoint() read it. Under a strategy that saves sharded
// (zero), `path` is a sharded checkpoint's directory instead, every process
// writing its part (checkpoint/sharded_checkpoint.h: the strategy's
// load_sharded(), or load_sharded_checkpoint() for DDP, read it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"
#include "cohort/torch/fit/monitor.h"

namespace cohort {

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  Monitor::Mode mode = Monitor::Mode::automatic;
  bool save_best_only = false;
  int64_t every_steps = 0;  // 0: at every epoch end
};

std::shared_ptr<Callback> model_checkpoint(std::string path, ModelCheckpointOptions options = {});

}  // namespace cohort
