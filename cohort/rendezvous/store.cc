#include "cohort/rendezvous/store.h"

#include <algorithm>
#include <cmath>

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"

namespace cohort::rendezvous {

Store::Store() {
  const double seconds = tunables::timeout_s();
  COHORT_CHECK_AS(ConfigError, std::isfinite(seconds) && seconds > 0)
      << "COHORT_TIMEOUT_S=" << seconds << " must be a positive number of seconds";
  // Capped at ten years so that the conversion cannot overflow.
  const double capped = std::min(seconds, 10 * 365 * 86400.0);
  default_timeout_ = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(capped));
  if (default_timeout_ < Duration(1)) default_timeout_ = Duration(1);
}

}  // namespace cohort::rendezvous
