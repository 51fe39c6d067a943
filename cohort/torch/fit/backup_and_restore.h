// BackupAndRestore: fault tolerance for fit() (Keras's callback, made exact).
// It backs up the whole fit state (model.h: model, optimizer, position in
// the epoch, partial metrics, history, callbacks' states, random generator)
// to <directory>/backup.ckpt at every epoch end (or every `every_steps`
// steps) and when the job is preempted; the file is written atomically by
// the chief and the previous one is kept as backup.ckpt.prev. When fit()
// starts and a backup exists, every rank resumes from it: the same batch
// with the same data order, so an interrupted and resumed run ends with the
// same parameters as one that never stopped. A successful fit() deletes the
// backup (unless keep_after_success). Under a strategy that saves sharded
// (zero), the strategy's state goes to <directory>/backup.shards, every
// process writing its own part (checkpoint/sharded_checkpoint.h), and the
// file names that save: the shards are written first, so the file never
// names an incomplete save, and the save before stays readable for the
// file before.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"

namespace cohort {

struct BackupAndRestoreOptions {
  int64_t every_steps = 0;          // 0: at every epoch end (and on preemption)
  bool keep_after_success = false;
};

std::shared_ptr<Callback> backup_and_restore(std::string directory, BackupAndRestoreOptions options = {});

// The backup file in `directory`.
std::string backup_path(const std::string& directory);

}  // namespace cohort
