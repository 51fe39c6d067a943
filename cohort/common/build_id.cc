#include "cohort/common/build_id.h"

#include "cohort/common/build_id_values.h"  // generated (cmake/build_id.cmake)

namespace cohort {

const char* build_id() { return COHORT_BUILD_ID; }
const char* build_description() { return COHORT_BUILD_DESCRIPTION; }
const char* libtorch_version() { return COHORT_LIBTORCH_VERSION; }

}  // namespace cohort
