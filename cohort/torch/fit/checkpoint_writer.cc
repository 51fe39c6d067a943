#include "cohort/torch/fit/checkpoint_writer.h"

#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/output_directory.h"
#include "cohort/torch/fit/step_telemetry.h"

namespace cohort {

void write_chief_checkpoint(Model& model, const std::string& path,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  // The step accounting's checkpoint time (its collectives count as waits).
  const CheckpointTimer timer;
  torch::serialize::OutputArchive archive;
  fill(archive);
  if (!model.is_chief()) return;
  create_parent_directories(path);
  write_checkpoint_file(path, archive_bytes(archive));
}

}  // namespace cohort
