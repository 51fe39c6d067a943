#include "cohort/launcher/output_forwarder.h"

#include <unistd.h>

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

void OutputForwarder::feed(std::string_view bytes) {
  std::string batch;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      break;
    }
    if (partial_.empty()) {
      emit(bytes.substr(0, nl), batch);
    } else {
      partial_.append(bytes.substr(0, nl));
      emit(partial_, batch);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
  while (partial_.size() >= options_.max_line_bytes) {
    emit(std::string_view(partial_).substr(0, options_.max_line_bytes), batch);
    partial_.erase(0, options_.max_line_bytes);
  }
  write_all(batch);
}

void OutputForwarder::finish() {
  if (partial_.empty()) return;
  std::string batch;
  emit(partial_, batch);
  partial_.clear();
  write_all(batch);
}

void OutputForwarder::write_all(const std::string& data) {
  size_t done = 0;
  while (writable_ && done < data.size()) {
    const ssize_t n = ::write(options_.out_fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // cohortrun's stdout was left non-blocking by whoever started it; wait
      // for room rather than dropping output.
      ::usleep(1000);
    } else {
      writable_ = false;
    }
  }
}

}  // namespace cohort::launcher
