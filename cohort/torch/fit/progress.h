// Progress of one epoch on rank 0: a redrawn bar with rate and ETA on a
// terminal, plain lines (one per tenth of the epoch) otherwise, e.g. under
// cohortrun, which forwards output through pipes.
//
//   [epoch 1/2] [#########.........] 450/938  loss 0.512  6210 samples/s  ETA 8s
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cohort {

enum class ProgressStyle { bar, lines, none };

// "auto" picks bar when `stream` is a terminal, else lines.
ProgressStyle parse_progress_style(const std::string& text, std::FILE* stream);

class Progress {
 public:
  // `samples_per_step`: over all ranks (the rate shown is the job's).
  Progress(std::FILE* out, ProgressStyle style, std::string label, int64_t total_steps, int64_t samples_per_step);
  // After step `done` (1-based) of this epoch, with the latest loss.
  void update(int64_t done, double loss);
  // Ends the bar's line (the caller then prints the epoch's summary).
  void finish();

  // "1m05s", "42s": for the ETA and summaries.
  static std::string format_duration(double seconds);

 private:
  void draw(int64_t done, double loss, bool final);

  std::FILE* out_;
  ProgressStyle style_;
  std::string label_;
  int64_t total_, samples_per_step_;
  int64_t first_ = -1;  // first step seen (a resumed epoch starts mid-way)
  int64_t next_line_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t last_done_ = 0;
  double last_loss_ = 0;
  bool line_ended_ = false;  // the bar's final state is drawn and its line ended
};

}  // namespace cohort
