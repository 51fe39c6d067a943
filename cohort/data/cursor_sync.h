// The cursor of a job whose ranks may have delivered different batches (an
// out-of-order window, a replay): every rank's progress is gathered and
// every rank computes the same cursor. Collective: `allgather` must span
// exactly the pipeline's ranks (gather_bytes.h: over a communicator or an
// engine).
#pragma once

#include "cohort/data/gather_bytes.h"
#include "cohort/data/pipeline.h"

namespace cohort::data {

Cursor gather_cursor(const AllgatherBytes& allgather, const Pipeline& pipeline);

}  // namespace cohort::data
