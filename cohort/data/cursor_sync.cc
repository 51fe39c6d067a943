#include "cohort/data/cursor_sync.h"

#include "cohort/common/check.h"
#include "cohort/data/gather_bytes.h"

namespace cohort::data {

Cursor gather_cursor(const AllgatherBytes& allgather, const Pipeline& pipeline) {
  const RankProgress mine = pipeline.progress();
  ByteWriter w;
  w.u64(uint64_t(pipeline.options().rank));
  w.u64(uint64_t(mine.in_order));
  w.u64(mine.extra.size());
  for (int64_t b : mine.extra) w.u64(uint64_t(b));
  const auto gathered = allgather(w.data());
  COHORT_CHECK_AS(ConfigError, gathered.size() == size_t(pipeline.options().world_size))
      << "gather_cursor: " << gathered.size() << " ranks answered; the pipeline has " << pipeline.options().world_size;
  std::vector<RankProgress> all;
  for (size_t r = 0; r < gathered.size(); ++r) {
    ByteReader in(gathered[r], "gather_cursor");
    COHORT_CHECK_AS(ConfigError, in.u64() == r)
        << "gather_cursor: the collective's rank " << r << " is another rank of the pipeline";
    RankProgress& p = all.emplace_back();
    p.in_order = int64_t(in.u64());
    p.extra.resize(size_t(in.u64()));
    for (int64_t& b : p.extra) b = int64_t(in.u64());
  }
  return pipeline.plan().advance(all);
}

}  // namespace cohort::data
