#include "cohort/tensorboard/event_file_name.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace cohort::tfevents {

std::string event_file_name(int64_t seconds, const std::string& host, int64_t pid, int64_t n) {
  return "events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(pid) + "." +
         std::to_string(n) + ".v2";
}

std::vector<std::string> list_event_files(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.path().filename().string().find(".tfevents.") != std::string::npos)
      paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace cohort::tfevents
