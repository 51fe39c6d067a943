#include "cohort/launcher/job_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace cohort::launcher {

std::string generate_job_id() {
  uint32_t random = 0;
  if (getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random))
    random = std::random_device{}();
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  char text[32];
  std::snprintf(text, sizeof text, "%08x%06x%08x", static_cast<uint32_t>(seconds),
                static_cast<uint32_t>(::getpid()) & 0xffffffu, random);
  return text;
}

std::string job_id_problem(std::string_view id) {
  if (id.empty()) return "the job id is empty";
  if (id.size() > 64) return "the job id is longer than 64 characters";
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.';
    if (!ok)
      return std::string("the job id '") + std::string(id) + "' contains '" + c +
             "'; use only letters, digits, '_' and '.'";
  }
  return {};
}

}  // namespace cohort::launcher
