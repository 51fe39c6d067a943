// RankSample: what one rank of a training job reports about its recent steps,
// a few times a second (publisher.h), for the straggler detector
// (straggler.h), the live dashboard and the post-run report
// (cohort/dashboard).
//
// The times are means per step over the steps since the previous sample
// (the sample's window), in milliseconds, and split a step's wall time the
// way a user asks "why is this rank slow":
//   input_ms      waiting for the next batch (the input pipeline)
//   compute_ms    forward, backward and optimizer on this rank's thread,
//                 excluding the time blocked in collectives
//   peer_wait_ms  blocked in a collective that some other rank had not
//                 submitted yet (waiting for the slowest peer: the engine
//                 knows when the last rank's request arrived)
//   transfer_ms   blocked in a collective every rank had submitted (moving
//                 and reducing the bytes)
//   checkpoint_ms writing checkpoints (fit()'s ModelCheckpoint and
//                 BackupAndRestore), excluding their collectives; one
//                 written between steps (at an epoch's end) counts in the
//                 next step
// step_ms is the wall time from one step's start (before its input) to the
// next's; compute + peer_wait + transfer + input + checkpoint equals it up
// to the time in fit()'s own bookkeeping and callbacks (other_ms, the rest).
//
// The JSON form (to_json / rank_sample_from_json) is the value of the store
// key keys::rank_sample(rank) and a row of the dashboard's /api/status; its
// field names are stable (docs/dashboard.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cohort::telemetry {

struct RankSample {
  int rank = 0;
  int size = 0;                   // ranks in the world the sample was taken in
  int64_t membership_epoch = -1;  // elastic jobs: the world's epoch; -1 otherwise
  std::string host;               // gethostname()
  int64_t pid = 0;
  int64_t epoch = 0;         // fit()'s epoch in progress (0-based)
  int64_t step = 0;          // steps since training started, done
  double unix_time_s = 0;    // when the sample was taken
  int64_t window_steps = 0;  // steps in the window the means cover
  double step_ms = 0;
  double compute_ms = 0;
  double peer_wait_ms = 0;
  double transfer_ms = 0;
  double input_ms = 0;
  double checkpoint_ms = 0;
  double other_ms = 0;
  double samples_per_s = 0;  // this rank's rows per second of wall time over the window
  int64_t rss_bytes = 0;     // resident set size of the process
};

// One JSON object, one line, no trailing newline.
std::string to_json(const RankSample& sample);
// Throws ConfigError naming `source` and the bad field.
RankSample rank_sample_from_json(std::string_view text, std::string_view source = "rank sample");

// Time blocked in collectives split in its two parts.
double wait_ms(const RankSample& s);

// The resident set size of this process (/proc/self/statm), 0 if unreadable.
int64_t resident_set_bytes();

}  // namespace cohort::telemetry
