// Forwarding of one rank's output: bytes from its pipe become lines
// prefixed with "[rank] ", written to the launcher's stdout or stderr, and the
// last lines are kept for the failure report.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace cohort::launcher {

// The last lines a rank printed (stdout and stderr, in arrival order).
class OutputTail {
 public:
  explicit OutputTail(size_t max_lines = 20) : max_lines_(max_lines) {}
  void add(std::string_view line);
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  size_t max_lines_;
  std::deque<std::string> lines_;
};

struct ForwarderOptions {
  int rank = 0;
  int out_fd = 1;  // where prefixed lines go
  // A line longer than this is forwarded in pieces, so a rank that never
  // writes '\n' cannot grow the launcher's memory without bound.
  size_t max_line_bytes = 64 * 1024;
};

// One stream (stdout or stderr) of one rank. Not thread-safe; the
// supervisor's loop owns it.
class OutputForwarder {
 public:
  // `tail` may be shared by the rank's two streams; it must outlive this.
  OutputForwarder(ForwarderOptions options, OutputTail* tail);

  // Forwards every complete line in `bytes` (one write for all of them) and
  // keeps an incomplete last line for later.
  void feed(std::string_view bytes);
  // Forwards the incomplete last line, if any, as a line (the stream ended).
  void finish();

  // False once writing to out_fd failed (e.g. the reader of cohortrun's
  // stdout went away); lines are then still kept in the tail but dropped.
  bool writable() const { return writable_; }

 private:
  void emit(std::string_view line, std::string& batch);
  void write_all(const std::string& data);

  ForwarderOptions options_;
  OutputTail* tail_;
  std::string prefix_;
  std::string partial_;
  bool writable_ = true;
};

}  // namespace cohort::launcher
