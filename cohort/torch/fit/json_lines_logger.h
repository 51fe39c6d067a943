// JsonLinesLogger: the run as JSON lines, written by the chief and flushed
// line by line (follow it with `tail -f`, read it with any JSON parser):
//   {"event":"start","strategy":"multi_worker:...","replicas":2,"epochs":2,"batch_size":128,"step":0}
//   {"event":"step","epoch":1,"step":50,"loss":0.61,"lr":0.1,"seconds":3.2}     every `every_steps`
//   {"event":"epoch","epoch":1,"step":469,"loss":0.52,"accuracy":0.81,...,"seconds":9.1}
//   {"event":"end","step":938,"seconds":18.4,<the last epoch's logs>}
// A resumed run appends to the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/fit/callback.h"

namespace cohort {

struct JsonLinesLoggerOptions {
  int64_t every_steps = 50;  // 0: no step events
  bool append = false;       // append even when not resumed
};

std::shared_ptr<Callback> json_lines_logger(std::string path, JsonLinesLoggerOptions options = {});

}  // namespace cohort
