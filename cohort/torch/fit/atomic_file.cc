#include "cohort/torch/fit/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cohort/common/check.h"

namespace cohort {

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  COHORT_CHECK_AS(ConfigError, f != nullptr) << "cannot write " << path << ": " << std::strerror(errno);
  const bool written = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(written && closed ? errno : saved);
    std::remove(tmp.c_str());
    COHORT_THROW(ConfigError) << "cannot write " << path << ": " << why;
  }
}

}  // namespace cohort
