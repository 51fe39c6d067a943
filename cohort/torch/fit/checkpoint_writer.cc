#include "cohort/torch/fit/checkpoint_writer.h"

#include <chrono>

#include "cohort/engine/blocked_time.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/output_directory.h"
#include "cohort/torch/fit/step_telemetry.h"

namespace cohort {

void write_chief_checkpoint(Model& model, const std::string& path,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  // The step accounting's checkpoint time: this call's, less its
  // collectives (a sharded save), which count as waits.
  const auto start = std::chrono::steady_clock::now();
  const engine::BlockedTime blocked = engine::this_thread_blocked_time();
  struct Account {
    std::chrono::steady_clock::time_point start;
    engine::BlockedTime blocked;
    ~Account() {
      const engine::BlockedTime now = engine::this_thread_blocked_time();
      const int64_t wall =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      const int64_t waits =
          static_cast<int64_t>((now.peer_wait_ns - blocked.peer_wait_ns) + (now.transfer_ns - blocked.transfer_ns));
      if (wall > waits) add_checkpoint_time(static_cast<uint64_t>(wall - waits));
    }
  } account{start, blocked};
  torch::serialize::OutputArchive archive;
  fill(archive);
  if (!model.is_chief()) return;
  create_parent_directories(path);
  write_checkpoint_file(path, archive_bytes(archive));
}

}  // namespace cohort
