#include "cohort/launcher/output_forwarder.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace cohort::launcher {
namespace {
// Lines kept for the report are cut here; the report is for humans.
constexpr size_t kTailLineBytes = 1024;
}  // namespace

void OutputTail::add(std::string_view line) {
  if (max_lines_ == 0) return;
  if (line.size() > kTailLineBytes) line = line.substr(0, kTailLineBytes);
  if (lines_.size() == max_lines_) lines_.pop_front();
  lines_.emplace_back(line);
}

OutputForwarder::OutputForwarder(ForwarderOptions options, OutputTail* tail)
    : options_(options), tail_(tail), prefix_("[" + std::to_string(options.rank) + "] ") {}

void OutputForwarder::emit(std::string_view line, std::string& batch) {
  if (tail_) tail_->add(line);
  batch += prefix_;
  batch += line;
  batch += '\n';
}

void OutputForwarder::end_line(std::string& batch) {
  emit(partial_, batch);
  partial_.clear();
  redrawing_ = false;
}

void OutputForwarder::feed(std::string_view bytes) {
  std::string batch;
  while (!bytes.empty()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes.front() == '\n') {  // "\r\n" ends a line like "\n"
        end_line(batch);
        bytes.remove_prefix(1);
        continue;
      }
      // The text after '\r' replaces the line's text so far, as on a terminal.
      partial_.clear();
      redrawing_ = true;
    }
    const size_t end = bytes.find_first_of("\r\n");
    partial_.append(bytes.substr(0, end));
    if (end == std::string_view::npos) break;
    if (bytes[end] == '\n') end_line(batch);
    else after_cr_ = true;
    bytes.remove_prefix(end + 1);
  }
  while (partial_.size() >= options_.max_line_bytes) {
    emit(std::string_view(partial_).substr(0, options_.max_line_bytes), batch);
    partial_.erase(0, options_.max_line_bytes);
  }
  write_all(batch);
  if (options_.live && writable_ && redrawing_ && !partial_.empty())
    writable_ = options_.live->draw(options_.out_fd, prefix_ + partial_, this);
}

void OutputForwarder::finish() {
  after_cr_ = false;
  if (partial_.empty()) {
    // A redrawn line left blank ends with nothing on the screen either.
    if (options_.live && writable_) writable_ = options_.live->clear(this);
    redrawing_ = false;
    return;
  }
  std::string batch;
  end_line(batch);
  write_all(batch);
}

void OutputForwarder::write_all(const std::string& data) {
  if (!writable_ || data.empty()) return;
  writable_ = options_.live ? options_.live->write_lines(options_.out_fd, data, this)
                            : write_fully(options_.out_fd, data);
}

bool LiveLine::write_lines(int fd, std::string_view lines, const void* owner) {
  if (!shown_) return write_fully(fd, lines);
  // "\r" and erase-line take the drawn line off; lines from its owner end
  // it, anything else is written above it and the drawn line comes back.
  std::string out = "\r\x1b[K";
  out += lines;
  if (owner == owner_) shown_ = false;
  else out += text_;
  return write_fully(fd, out);
}

bool LiveLine::draw(int fd, std::string_view text, const void* owner) {
  std::string out;
  if (shown_ && fd != fd_) out = "\r\x1b[K";  // a line drawn through the other stream
  if (!out.empty() && !write_fully(fd_, out)) return false;
  shown_ = true;
  fd_ = fd;
  owner_ = owner;
  text_ = text;
  return write_fully(fd, "\r" + text_ + "\x1b[K");
}

bool LiveLine::clear(const void* owner) {
  if (!shown_ || owner != owner_) return true;
  shown_ = false;
  return write_fully(fd_, "\r\x1b[K");
}

bool write_fully(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // Our stdout was left non-blocking by whoever started us; wait for
      // room rather than dropping output.
      ::usleep(1000);
    } else {
      return false;
    }
  }
  return true;
}

OutputRelay::~OutputRelay() {
  if (from_ >= 0) ::close(from_);
}

void OutputRelay::pump() {
  if (from_ < 0) return;
  // A reader that went away loses the output, not the rank.
  const bool open = read_available(from_, 1 << 20, [&](std::string_view bytes) { write_fully(to_, bytes); });
  if (!open) {
    ::close(from_);
    from_ = -1;
  }
}

bool read_available(int fd, size_t budget, const std::function<void(std::string_view)>& sink) {
  char buffer[64 * 1024];
  while (budget > 0) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      sink(std::string_view(buffer, static_cast<size_t>(n)));
      budget -= std::min(budget, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace cohort::launcher
