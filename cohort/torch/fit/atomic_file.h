// Writes a small text file (a CSV, a JSON summary) so that readers see the
// old file or the new one, never half of one: common/atomic_file.h's
// write_file_atomically(), without fsync (fit() rewrites these files every
// epoch from state it holds, so one lost to a power cut is written again;
// a disk flush per epoch would stall the chief for nothing). ConfigError
// naming the path when it cannot be written.
#pragma once

#include <string>

namespace cohort {

void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace cohort
