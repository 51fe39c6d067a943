// ElasticShardFiles: the ElasticShards of core/elastic_state.h for state
// that is written and read as a sharded checkpoint's records (ZeRO's blocks,
// strategy/zero.h), so that an elastic job's commit needs no member to hold
// the whole state.
//
// A commit (collective): every member writes its part as a shard file in
// /dev/shm (/dev/shm/cohort-<job>-elastic-<pid>.<n>-...: tmpfs, so memory,
// outside the process's heap; removed by this object, and by cohortrun at
// the job's end whatever happened), the members agree that every part was
// written (one small allreduce), and each sends a copy of its part to the
// next member in rank order, which keeps it beside its own. Part p of a
// world of W is then held by members p and p+1 (mod W): no single death
// loses it, and no member holds more than two parts of a commit (but after
// a restore, below). The two newest commits are kept, since a member lost
// during a commit's exchange leaves some members holding it and others only
// the one before.
//
// A restore (collective over the new world): the members say which parts
// of which commits they hold, choose the newest commit held whole, and
// gather its parts as a sharded checkpoint in /dev/shm: a part a member
// holds is linked in (no copy), a part some member lacks is broadcast by its
// lowest holder, one in flight, and a part every member holds travels
// nowhere. Every member reads the checkpoint back at the new world's size
// (the checkpoint format reshards) and keeps it whole (every part, never
// in its heap) in place of its older commits, until two commits in the new
// layout replace it: no death before then loses it, and the restore needs
// no commit of its own (fetching only the ranges each new block needs would
// spare the whole copy). Two members that held the same part dying together
// lose that commit (Error, naming it).
//
// The copy travels by the engine's allgather: each member receives every
// part and keeps its predecessor's (the engine's uneven alltoall pads every
// block to the largest: 0.35-0.65 s of a 0.45-0.78 s commit of the 20M mlp's
// zero parts at 3 ranks, against 0.17 s by allgather). Fine for
// the worlds of a few members this serves today; a ring of point-to-point
// sends would cost one part.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/core/elastic_state.h"

namespace cohort {

class ElasticShardFiles final : public ElasticShards {
 public:
  // `write`: this member's part (not collective). `read`: the whole state
  // from a checkpoint of every part (collective over the current world).
  ElasticShardFiles(std::function<void(ShardWriter&)> write, std::function<void(const ShardedCheckpoint&)> read);
  // Removes its files.
  ~ElasticShardFiles() override;
  ElasticShardFiles(const ElasticShardFiles&) = delete;
  ElasticShardFiles& operator=(const ElasticShardFiles&) = delete;

  void commit(int64_t serial) override;
  int64_t restore(int64_t serial_if_none) override;

 private:
  // Part `part` of commit `serial` made by a world of `world` members, as
  // this member's commit() number `generation` kept it (a commit kept again
  // after a restore may repeat a serial and a world: its files differ).
  struct Part {
    int64_t generation;
    int64_t serial;
    int64_t world;
    int64_t part;
  };
  std::string path_of(const Part& p) const;
  const Part* find(int64_t serial, int64_t world, int64_t part) const;
  // Drops the files of all but the newest `keep` commits.
  void keep_newest(size_t keep);

  std::function<void(ShardWriter&)> write_;
  std::function<void(const ShardedCheckpoint&)> read_;
  std::string prefix_;  // of every file's path
  int64_t generation_ = 0;
  // Per commit (oldest first): the parts held, this member's and its copy.
  std::vector<std::vector<Part>> commits_;
};

}  // namespace cohort
