// EngineStats: counters of one engine on one rank, for tests (which assert
// the paths taken, not timings), benchmarks and monitoring.
#pragma once

#include <cstdint>

namespace cohort::engine {

struct EngineStats {
  uint64_t cycles = 0;          // cycles run (one record exchange each)
  uint64_t negotiations = 0;    // cycles that exchanged negotiation payloads (slow path)
  uint64_t cache_hits = 0;      // submissions found in the response cache (agreed by bit)
  uint64_t cache_misses = 0;    // named submissions reported by name
  uint64_t ops_completed = 0;   // this rank's requests completed successfully
  uint64_t ops_failed = 0;      // this rank's requests failed
  uint64_t fused_ops = 0;       // ops that ran through the fusion buffer
  uint64_t fusion_groups = 0;   // collectives run on the fusion buffer
  uint64_t bytes = 0;           // input bytes of this rank's requests that ran
  uint64_t sleeps = 0;          // times the engine thread slept on the doorbell
  uint64_t rings = 0;           // doorbell rings made from this rank
  uint64_t mismatches = 0;      // names or ordered ops that failed with MismatchError
  uint64_t stall_warnings = 0;  // stall reports logged (rank 0)
  uint64_t negotiation_ns = 0;  // time in record exchange, payload exchange and decisions
  uint64_t execution_ns = 0;    // time running ops (copies and collectives)
  // Autotune (COHORT_AUTOTUNE): the settings this rank runs its cycles with
  // (rank 0's record's, the configured ones before any), and how many times
  // they changed. Every rank runs every cycle, so after the same cycles
  // (e.g. after shutdown()) every rank has the same three values.
  uint64_t tuning_changes = 0;
  uint64_t fusion_threshold_bytes = 0;
  uint64_t cycle_time_us = 0;
};

}  // namespace cohort::engine
