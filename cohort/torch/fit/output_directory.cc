#include "cohort/torch/fit/output_directory.h"

#include <filesystem>
#include <system_error>

#include "cohort/common/check.h"

namespace cohort {

void create_parent_directories(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(parent, error);
  COHORT_CHECK_AS(ConfigError, !error) << "cannot create the folder " << parent.string() << " for " << path << ": "
                                       << error.message();
}

}  // namespace cohort
