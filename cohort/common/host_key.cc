#include "cohort/common/host_key.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "cohort/common/network_interface.h"

namespace cohort::net {
namespace {

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string link_target(const char* path) {
  char buffer[256] = {};
  const ssize_t n = ::readlink(path, buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string host_key() {
  if (const char* host = std::getenv("COHORT_HOST"); host && *host) return host;
  return host_name() + "/" + first_line("/proc/sys/kernel/random/boot_id") + "/" + link_target("/proc/self/ns/net");
}

std::string host_label() {
  if (const char* host = std::getenv("COHORT_HOST"); host && *host) return host;
  return host_name();
}

uint64_t host_key_hash(const std::string& key) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace cohort::net
