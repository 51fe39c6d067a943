#include "cohort/data/cursor_sync.h"

#include "cohort/common/check.h"

namespace cohort::data {

Cursor gather_cursor(comm::Communicator& comm, const Pipeline& pipeline) {
  const int world = comm.size();
  COHORT_CHECK_AS(ConfigError, world == pipeline.options().world_size && comm.rank() == pipeline.options().rank)
      << "gather_cursor: the communicator is rank " << comm.rank() << " of " << world << ", the pipeline rank "
      << pipeline.options().rank << " of " << pipeline.options().world_size;
  const RankProgress mine = pipeline.progress();
  // Per rank: in-order prefix and the number of extra batches; then the
  // extras themselves.
  int64_t header[2] = {mine.in_order, int64_t(mine.extra.size())};
  std::vector<int64_t> headers(size_t(2 * world));
  comm.allgather({header, 2, DType::i64}, {headers.data(), headers.size(), DType::i64});
  std::vector<size_t> counts(static_cast<size_t>(world));
  size_t total = 0;
  for (int r = 0; r < world; ++r) total += counts[size_t(r)] = size_t(headers[size_t(2 * r + 1)]);
  std::vector<int64_t> extras(total);
  std::vector<int64_t> send = mine.extra;
  comm.allgatherv({send.data(), send.size(), DType::i64}, {extras.data(), extras.size(), DType::i64}, counts);
  std::vector<RankProgress> all(static_cast<size_t>(world));
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    all[size_t(r)].in_order = headers[size_t(2 * r)];
    all[size_t(r)].extra.assign(extras.begin() + long(at), extras.begin() + long(at + counts[size_t(r)]));
    at += counts[size_t(r)];
  }
  return pipeline.plan().advance(all);
}

}  // namespace cohort::data
