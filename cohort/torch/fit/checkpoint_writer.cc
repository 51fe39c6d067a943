#include "cohort/torch/fit/checkpoint_writer.h"

#include <filesystem>

#include "cohort/common/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/fit/model.h"

namespace cohort {

void write_chief_checkpoint(Model& model, const std::string& path,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  if (!model.is_chief()) return;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  COHORT_CHECK_AS(ConfigError, !ec) << "cannot create the directory of " << path << ": " << ec.message();
  write_checkpoint_file(path, archive_bytes(archive));
}

}  // namespace cohort
