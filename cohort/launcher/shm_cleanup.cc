#include "cohort/launcher/shm_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>


namespace cohort::launcher {

std::vector<std::string> remove_job_segments(const std::string& job_id, const std::string& directory) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return removed;
  const std::string prefix = "cohort-" + job_id + "-";
  std::vector<std::string> matches;
  // Collected first: unlinking while iterating may skip entries.
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name.starts_with(prefix)) matches.emplace_back(name);
  }
  for (const std::string& name : matches) {
    // A directory (an elastic restore's parts, torch/checkpoint/
    // elastic_shards.h) goes with its contents.
    std::error_code error;
    if (std::filesystem::remove_all(std::filesystem::path(directory) / name, error) > 0 && !error)
      removed.push_back(name);
  }
  ::closedir(dir);
  return removed;
}

}  // namespace cohort::launcher
