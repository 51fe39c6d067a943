// Request: one submitted op as the engine holds it on the submitting rank.
//
// Created by a submit call (any thread), handed to the engine thread through
// the submission queue, and owned by the engine thread from then until it
// completes or fails the request's handle.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cohort/common/buffer_view.h"
#include "cohort/engine/handle.h"
#include "cohort/engine/op.h"
#include "cohort/engine/options.h"

namespace cohort::engine {

using Clock = std::chrono::steady_clock;

struct Request {
  std::string name;  // empty for ordered submissions
  OpMeta meta;
  BufferView in;   // input (broadcast: the buffer, in place)
  BufferView out;  // output (allgather: unused, see allocate)
  bool ordered = false;
  AllgatherAllocator allocate;
  std::shared_ptr<HandleState> state;

  // Engine-thread bookkeeping.
  enum class Status { fresh, cached, reported };
  Status status = Status::fresh;
  int slot = -1;  // response-cache slot while cached
  Clock::time_point submitted{}, collected{}, ready{};
};

}  // namespace cohort::engine
