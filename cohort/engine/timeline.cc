#include "cohort/engine/timeline.h"

#include <cerrno>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/common/json.h"
#include "cohort/common/logging.h"

namespace cohort::engine {

Timeline::Timeline(const std::string& path, int rank, const std::string& label)
    : path_(path), pid_(rank), origin_(Clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  COHORT_CHECK_AS(ConfigError, file_ != nullptr)
      << "COHORT_TIMELINE: cannot create '" << path << "': " << std::strerror(errno);
  std::fputs("[\n", file_);
  // Name the process row after the engine.
  std::fprintf(file_,
               "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
               "\"args\": {\"name\": \"cohort engine '%s' rank %d\"}}",
               pid_, json::escape(label).c_str(), rank);
  first_ = false;
  writer_ = std::thread([this] { writer_loop(); });
}

Timeline::~Timeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

double Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Timeline::span(const std::string& lane, const char* phase, Clock::time_point begin, Clock::time_point end,
                    std::string args) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Event{'X', lane, phase, begin, std::max(begin, end), std::move(args)});
    ++appended_;
  }
  cv_.notify_one();
}

void Timeline::instant(const std::string& lane, const std::string& what, Clock::time_point at) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Event{'i', lane, what, at, at, {}});
    ++appended_;
  }
  cv_.notify_one();
}

void Timeline::flush() {
  std::unique_lock lock(mutex_);
  const uint64_t target = appended_;
  flushed_.wait(lock, [&] { return written_ >= target; });
}

int Timeline::lane_id(const std::string& lane) {
  auto [it, inserted] = lanes_.try_emplace(lane, static_cast<int>(lanes_.size()) + 1);
  if (inserted) {
    std::fprintf(file_,
                 ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"name\": \"%s\"}}",
                 pid_, it->second, json::escape(lane).c_str());
    // Lanes sorted in order of first appearance.
    std::fprintf(file_,
                 ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"sort_index\": %d}}",
                 pid_, it->second, it->second);
  }
  return it->second;
}

void Timeline::write_event(const Event& e) {
  const int tid = lane_id(e.lane);
  if (e.ph == 'X') {
    std::fprintf(file_,
                 ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
                 json::escape(e.name).c_str(), pid_, tid, micros(e.begin), micros(e.end) - micros(e.begin));
  } else {
    std::fprintf(file_, ",\n{\"name\": \"%s\", \"ph\": \"i\", \"s\": \"t\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f",
                 json::escape(e.name).c_str(), pid_, tid, micros(e.begin));
  }
  if (!e.args.empty()) std::fprintf(file_, ", \"args\": {%s}", e.args.c_str());
  std::fputc('}', file_);
}

void Timeline::writer_loop() {
  std::vector<Event> batch;
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty() && stop_) break;
    batch.swap(queue_);
    lock.unlock();
    for (const Event& e : batch) write_event(e);
    std::fflush(file_);
    const size_t n = batch.size();
    batch.clear();
    lock.lock();
    written_ += n;
    flushed_.notify_all();
  }
}

}  // namespace cohort::engine
