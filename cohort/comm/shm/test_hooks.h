// Points at which a test can stop a rank of the shm communicator, to force an
// interleaving that is otherwise a matter of luck (a peer that leaves between
// two reads of a waiter, a rank killed while it writes the abort record).
// Null in every real run. Set them before the ranks start and reset them
// after they end; the process's ranks all call the same hook, so a hook
// decides itself which rank it stops.
#pragma once

namespace cohort::comm::shm::test_hooks {

// At the start of each probe of a waiting rank, before it looks at its peers.
inline void (*before_probe)() = nullptr;

// After a rank has claimed the abort record, before it writes the record.
inline void (*after_abort_claim)() = nullptr;

}  // namespace cohort::comm::shm::test_hooks
