#include "cohort/tensorboard/event_file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/common/network_interface.h"
#include "cohort/data/record_format.h"
#include "cohort/tensorboard/event.pb.h"
#include "cohort/tensorboard/event_file_name.h"

namespace cohort::tfevents {
namespace {

// TensorFlow's global_uid: distinct names for the files one process opens
// within a second.
std::atomic<int64_t> next_file_number{0};

}  // namespace

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  COHORT_CHECK_AS(ConfigError, !ec) << "cannot create the TensorBoard run directory " << dir << ": " << ec.message();
  const double now = wall_time_now();
  std::string host = net::host_name();
  if (host.empty()) host = "localhost";
  path_ = (std::filesystem::path(dir) /
           event_file_name(int64_t(std::floor(now)), host, int64_t(::getpid()), next_file_number.fetch_add(1)))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  COHORT_CHECK_AS(ConfigError, fd_ >= 0) << "cannot create the event file " << path_ << ": " << std::strerror(errno)
                                         << " (is the log directory writable?)";
  proto::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  add_record(event.SerializeAsString());
  flush();
}

EventFileWriter::~EventFileWriter() {
  try {
    flush();
  } catch (const std::exception& e) {
    COHORT_LOG(warn) << e.what();
  }
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::add_scalar(std::string_view tag, int64_t step, float value, double wall_time) {
  proto::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  proto::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(value);
  add_record(event.SerializeAsString());
}

void EventFileWriter::add_record(const std::string& event_bytes) {
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(event_bytes.data()), event_bytes.size());
  uint8_t header[data::kRecordHeaderBytes], footer[data::kRecordFooterBytes];
  data::encode_record_header(data.size(), header);
  data::encode_record_footer(data, footer);
  buffer_.append(reinterpret_cast<const char*>(header), sizeof header);
  buffer_.append(event_bytes);
  buffer_.append(reinterpret_cast<const char*>(footer), sizeof footer);
}

void EventFileWriter::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // What was not written is dropped: retrying would write a frame twice
      // after a partial one.
      buffer_.clear();
      COHORT_THROW(Error) << "cannot write the event file " << path_ << ": " << std::strerror(err);
    }
    done += size_t(n);
  }
  buffer_.clear();
}

}  // namespace cohort::tfevents
