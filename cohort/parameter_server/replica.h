// Replicas: a copy of a partition's shards kept on another server.
//
// The primary sends a snapshot every replicate_every updates (and when a
// shard is declared): whole dense shards, and for row-sparse shards only the
// rows changed since the last snapshot (the first snapshot of a shard is
// whole). The replica applies it to a Partition of its own that nobody
// reads until promote() makes it the primary. A synchronous partition
// makes a step visible to pulls only after the replica confirmed it
// (Partition::snapshot_due), so with replicate_every=1 no update a worker
// has seen is ever lost; with larger values up to replicate_every - 1
// updates can be, and the server that takes over says how many.
//
// A snapshot may carry a marker (Partition::Marker, in header.aux, its
// version in header.step): keep the state just applied as a commit (with no
// shard records when the replica has that state already), or the primary
// restored a commit (the snapshot is then whole): the replica's commits
// follow the primary's, so that the partition's server can die without
// losing them.
#pragma once

#include "cohort/parameter_server/partition.h"
#include "cohort/parameter_server/wire.h"

namespace cohort::ps {

// Encodes the snapshot due on `primary` and clears its dirty rows.
Message make_snapshot(Partition& primary);

// Applies a snapshot to `replica` (shards created on their first, whole,
// record). Returns the snapshot's version.
int64_t apply_snapshot(Partition& replica, Message& snapshot);

// The workers' clocks as "worker=clock;..." and back.
std::string encode_clocks(const Partition& partition);
std::map<uint32_t, int64_t> decode_clocks(std::string_view text);

}  // namespace cohort::ps
