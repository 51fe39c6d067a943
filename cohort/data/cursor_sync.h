// The cursor of a job whose ranks may have delivered different batches (an
// out-of-order window, a replay): every rank's progress is gathered and
// every rank computes the same cursor. Collective over `comm`, whose ranks
// must be the pipeline's (same rank numbers and world size).
#pragma once

#include "cohort/comm/communicator.h"
#include "cohort/data/pipeline.h"

namespace cohort::data {

Cursor gather_cursor(comm::Communicator& comm, const Pipeline& pipeline);

}  // namespace cohort::data
