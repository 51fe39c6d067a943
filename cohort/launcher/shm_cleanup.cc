#include "cohort/launcher/shm_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>


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
  for (const std::string& name : matches)
    if (::unlinkat(::dirfd(dir), name.c_str(), 0) == 0) removed.push_back(name);
  ::closedir(dir);
  return removed;
}

}  // namespace cohort::launcher
