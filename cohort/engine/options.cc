#include "cohort/engine/options.h"

#include "cohort/common/check.h"
#include "cohort/common/tunables.h"

namespace cohort::engine {

EngineOptions EngineOptions::resolve() const {
  EngineOptions o = *this;
  if (o.fusion_threshold_bytes < 0) o.fusion_threshold_bytes = tunables::fusion_threshold();
  if (o.linger.count() < 0) o.linger = std::chrono::microseconds(tunables::cycle_linger_us());
  if (o.stall_warning_s < 0) o.stall_warning_s = tunables::stall_warning_s();
  if (o.stall_shutdown_s < 0) o.stall_shutdown_s = tunables::stall_shutdown_s();
  // An op that some ranks submitted and others never do is a wait on peers
  // like any collective: unless told otherwise, COHORT_TIMEOUT_S bounds it.
  if (o.stall_shutdown_s < 0) o.stall_shutdown_s = tunables::timeout_s();
  if (!o.timeline_path) o.timeline_path = tunables::timeline();
  if (o.cache_capacity < 0) o.cache_capacity = tunables::cache_capacity();
  COHORT_CHECK_AS(ConfigError, o.fusion_threshold_bytes >= 0)
      << "COHORT_FUSION_THRESHOLD=" << o.fusion_threshold_bytes << " must not be negative";
  COHORT_CHECK_AS(ConfigError, o.linger.count() >= 0)
      << "COHORT_CYCLE_LINGER_US=" << o.linger.count() << " must not be negative";
  COHORT_CHECK_AS(ConfigError, o.stall_warning_s >= 0)
      << "COHORT_STALL_WARNING_S=" << o.stall_warning_s << " must not be negative";
  COHORT_CHECK_AS(ConfigError, o.stall_shutdown_s >= 0)
      << "COHORT_STALL_SHUTDOWN_S=" << o.stall_shutdown_s << " must not be negative";
  COHORT_CHECK_AS(ConfigError, o.cache_capacity >= 0)
      << "COHORT_CACHE_CAPACITY=" << o.cache_capacity << " must not be negative";
  COHORT_CHECK_AS(ConfigError, o.doorbell_slice.count() > 0) << "doorbell_slice must be positive";
  COHORT_CHECK_AS(ConfigError, o.liveness_probe.count() > 0) << "liveness_probe must be positive";
  return o;
}

}  // namespace cohort::engine
