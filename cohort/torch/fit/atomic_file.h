// Writes a small text file (a CSV, a JSON summary) so that readers see the
// old file or the new one, never half of one: a temporary file in the same
// directory, renamed over the path. ConfigError naming the path when it
// cannot be written.
#pragma once

#include <string>

namespace cohort {

void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace cohort
