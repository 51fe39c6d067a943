#include "cohort/torch/fit/atomic_file.h"

#include "cohort/common/atomic_file.h"

namespace cohort {

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_file_atomically(path, std::string_view(contents), {.durability = Durability::none});
}

}  // namespace cohort
