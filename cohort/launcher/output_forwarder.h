// Forwarding of one rank's output: bytes from its pipe or pseudo-terminal
// become lines prefixed with "[rank] ", written to the launcher's stdout or
// stderr, and the last lines are kept for the failure report. A line is
// never split between two writes nor joined to another rank's: a rank that
// dies mid-line gets its piece forwarded as a line of its own.
//
// A line a rank redraws ("\r" then new text, as progress bars do) counts as
// what a terminal would end up showing: its last text. Where cohortrun
// writes to a terminal, the redrawn text is also shown as it changes, on the
// terminal's bottom line (LiveLine), with other lines written above it.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
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

// The bottom line of the terminal cohortrun writes to: the line a rank is
// redrawing is shown there as it changes, and complete lines (of any rank,
// or cohortrun's own) are written above it. One per launcher, shared by the
// forwarders whose output is a terminal. Not thread-safe.
class LiveLine {
 public:
  // Writes complete lines to `fd`: takes the drawn line off the screen first
  // and draws it again below them, unless they come from its `owner` (whose
  // redrawn line they complete). False when writing failed.
  bool write_lines(int fd, std::string_view lines, const void* owner);
  // Shows `text` as the line `owner` is redrawing, in place of any other.
  bool draw(int fd, std::string_view text, const void* owner);
  // Takes `owner`'s drawn line off the screen, if it is shown.
  bool clear(const void* owner);

 private:
  bool shown_ = false;
  int fd_ = -1;
  const void* owner_ = nullptr;
  std::string text_;
};

struct ForwarderOptions {
  int rank = 0;
  int out_fd = 1;  // where prefixed lines go
  // Set when out_fd is a terminal: redrawn lines are shown there live.
  LiveLine* live = nullptr;
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
  // keeps an incomplete last line for later (showing it on the live line
  // when it is being redrawn).
  void feed(std::string_view bytes);
  // Forwards the incomplete last line, if any, as a line (the stream ended).
  void finish();

  // False once writing to out_fd failed (e.g. the reader of cohortrun's
  // stdout went away); lines are then still kept in the tail but dropped.
  bool writable() const { return writable_; }

 private:
  void emit(std::string_view line, std::string& batch);
  void end_line(std::string& batch);
  void write_all(const std::string& data);

  ForwarderOptions options_;
  OutputTail* tail_;
  std::string prefix_;
  std::string partial_;
  bool after_cr_ = false;   // the last byte was '\r': a redraw, unless '\n' follows
  bool redrawing_ = false;  // partial_ is the latest text of a line being redrawn
  bool writable_ = true;
};

// Copies the bytes that arrive on `from` to `to` unchanged: the remote end of
// a rank passes its program's output on to the launcher, which forwards it
// by lines. Owns `from` (non-blocking).
class OutputRelay {
 public:
  OutputRelay(int from, int to) : from_(from), to_(to) {}
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // The descriptor to poll; -1 once it has ended.
  int fd() const { return from_; }
  // Copies what is there now. Closes `from` when it has ended: end of file,
  // or EIO from a pseudo-terminal that no process holds any more.
  void pump();

 private:
  int from_;
  int to_;
};

// Writes all of `data` to `fd`, waiting while a non-blocking `fd` is full;
// false when writing failed (the reader went away).
bool write_fully(int fd, std::string_view data);

// Reads what the non-blocking `fd` holds now, about `budget` bytes at most
// (so that one chatty rank cannot starve the caller's other duties), and
// passes each chunk to `sink`. False once `fd` has ended: end of file, or an
// error that will not go away (EIO from a pseudo-terminal no process holds
// any more); the caller closes it.
bool read_available(int fd, size_t budget, const std::function<void(std::string_view)>& sink);

}  // namespace cohort::launcher
