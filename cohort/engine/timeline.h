// Timeline: a Chrome trace (the JSON array format; chrome://tracing and
// Perfetto open it) of an engine's ops and cycles.
//
// Each op name gets a lane (a trace "thread", named after the op); an op's
// phases are complete ("X") events on its lane:
//   QUEUE           submitted -> picked up by a cycle
//   NEGOTIATE       picked up -> every rank has it (uncached: by name through
//                   the coordinator's table; cached: by its response-cache bit)
//   WAIT_FOR_CYCLE  agreed -> its collective starts (ops before it in the cycle)
//   FUSION_COPY_IN  packing into the fusion buffer (fused ops only)
//   COLLECTIVE      the collective (the op's own, or its fusion group's)
//   COPY_OUT        unpacking and post-scaling
// and an enclosing event named after the kind (ALLREDUCE, ...) with the op's
// size. Cycles that did work appear on a "cycles" lane.
//
// The engine thread only appends events to a queue under a mutex; a writer
// thread formats and writes them, so the cycle never does file I/O. The file
// is valid JSON once the Timeline is destroyed (the array is closed); until
// then it is a prefix that the trace viewers also accept.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cohort::engine {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (truncates) `path`; ConfigError when it cannot be created.
  Timeline(const std::string& path, int rank, const std::string& label);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A phase [begin, end) on `lane`. `args` is a JSON object body
  // ("\"bytes\": 12") or empty.
  void span(const std::string& lane, const char* phase, Clock::time_point begin, Clock::time_point end,
            std::string args = {});
  // A point event on `lane`.
  void instant(const std::string& lane, const std::string& what, Clock::time_point at);

  // Blocks until everything appended so far is written (tests).
  void flush();

  const std::string& path() const { return path_; }

 private:
  struct Event {
    char ph;
    std::string lane;
    std::string name;
    Clock::time_point begin, end;
    std::string args;
  };
  void writer_loop();
  void write_event(const Event& e);
  int lane_id(const std::string& lane);
  double micros(Clock::time_point t) const;

  std::string path_;
  int pid_;
  std::FILE* file_ = nullptr;
  Clock::time_point origin_;
  std::mutex mutex_;
  std::condition_variable cv_, flushed_;
  std::vector<Event> queue_;
  uint64_t appended_ = 0, written_ = 0;
  bool stop_ = false;
  bool first_ = true;
  std::unordered_map<std::string, int> lanes_;  // writer thread only
  std::thread writer_;
};

}  // namespace cohort::engine
