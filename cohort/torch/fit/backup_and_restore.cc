#include "cohort/torch/fit/backup_and_restore.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/checkpoint_writer.h"
#include "cohort/torch/fit/model.h"

namespace cohort {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

class BackupAndRestore : public Callback {
 public:
  BackupAndRestore(std::string directory, BackupAndRestoreOptions options)
      : path_(backup_path(directory)), shards_(directory + "/backup.shards"), options_(options) {
    COHORT_CHECK_AS(ConfigError, !directory.empty()) << "BackupAndRestore: a directory is required";
    COHORT_CHECK_AS(ConfigError, options_.every_steps >= 0) << "BackupAndRestore: every_steps must be >= 0";
  }

  std::string name() const override { return "backup_and_restore"; }

  // The chief reads the backup (or, if it is damaged, the previous one) and
  // every process loads the chief's bytes: one collective, also when there
  // is nothing to resume from.
  void restore(Model& model) override {
    std::vector<char> bytes;
    std::string read_from;
    if (model.is_chief()) bytes = read_backup(read_from);
    const at::Tensor mine = torch::from_blob(bytes.data(), {int64_t(bytes.size())}, torch::kUInt8).clone();
    const at::Tensor shared = model.strategy().all_gather(mine);
    if (shared.numel() == 0) return;
    torch::serialize::InputArchive archive;
    archive.load_from(static_cast<const char*>(shared.data_ptr()), size_t(shared.numel()));
    model.load_fit_state(archive, shards_);
    if (model.is_chief())
      COHORT_LOG(warn) << "BackupAndRestore: resuming from " << read_from << " at epoch " << model.position().epoch + 1
                       << ", batch " << model.position().batch << " (step " << model.position().step << ")";
  }

  void on_train_batch_end(Model& model, int64_t, const Logs&) override {
    if (options_.every_steps > 0 && model.position().step % options_.every_steps == 0) save(model);
  }
  void on_epoch_end(Model& model, int64_t, const Logs&) override { save(model); }
  void on_preemption(Model& model) override { save(model); }

  void on_train_end(Model& model, const Logs&) override {
    if (options_.keep_after_success || !model.is_chief()) return;
    std::remove(path_.c_str());
    std::remove(previous_checkpoint_path(path_).c_str());
    std::error_code ignored;
    std::filesystem::remove_all(shards_, ignored);
  }

 private:
  // The newest readable backup's bytes (none: nothing to resume), and in
  // `read_from` which file that was.
  std::vector<char> read_backup(std::string& read_from) const {
    const std::string prev = previous_checkpoint_path(path_);
    if (!exists(path_) && !exists(prev)) return {};
    try {
      read_from = path_;
      return read_checkpoint_file(path_);
    } catch (const ConfigError& e) {
      if (!exists(prev)) throw;
      COHORT_LOG(warn) << e.what() << "; falling back to the backup before it, " << prev;
      read_from = prev;
      return read_checkpoint_file(prev);
    }
  }

  void save(Model& model) {
    // A sharded strategy's state goes to shards_ (every process its part),
    // the rest to the chief's file.
    write_chief_checkpoint(model, path_,
                           [&](torch::serialize::OutputArchive& a) { model.save_fit_state(a, shards_); });
  }

  std::string path_, shards_;
  BackupAndRestoreOptions options_;
};

}  // namespace

std::string backup_path(const std::string& directory) { return directory + "/backup.ckpt"; }

std::shared_ptr<Callback> backup_and_restore(std::string directory, BackupAndRestoreOptions options) {
  return std::make_shared<BackupAndRestore>(std::move(directory), options);
}

}  // namespace cohort
