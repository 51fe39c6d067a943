#include "cohort/data/cursor_sync.h"

#include "cohort/common/check.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

Cursor gather_cursor(comm::Communicator& comm, const Pipeline& pipeline) {
  const int world = comm.size();
  COHORT_CHECK_AS(ConfigError, world == pipeline.options().world_size && comm.rank() == pipeline.options().rank)
      << "gather_cursor: the communicator is rank " << comm.rank() << " of " << world << ", the pipeline rank "
      << pipeline.options().rank << " of " << pipeline.options().world_size;
  const RankProgress mine = pipeline.progress();
  ByteWriter w;
  w.u64(uint64_t(mine.in_order));
  w.u64(mine.extra.size());
  for (int64_t b : mine.extra) w.u64(uint64_t(b));
  std::vector<RankProgress> all;
  for (const auto& bytes : allgather_bytes(comm, w.data())) {
    ByteReader r(bytes, "gather_cursor");
    RankProgress& p = all.emplace_back();
    p.in_order = int64_t(r.u64());
    p.extra.resize(size_t(r.u64()));
    for (int64_t& b : p.extra) b = int64_t(r.u64());
  }
  return pipeline.plan().advance(all);
}

}  // namespace cohort::data
