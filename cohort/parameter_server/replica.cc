#include "cohort/parameter_server/replica.h"

#include <charconv>
#include <cstring>

#include "cohort/common/check.h"
#include "cohort/parameter_server/shard_record.h"

namespace cohort::ps {

std::string encode_clocks(const Partition& p) {
  std::string out;
  for (uint32_t w = 0; w < static_cast<uint32_t>(p.config().num_workers); ++w)
    out += std::to_string(w) + "=" + std::to_string(p.clock(w)) + ";";
  return out;
}

std::map<uint32_t, int64_t> decode_clocks(std::string_view text) {
  std::map<uint32_t, int64_t> clocks;
  for (const std::string& item : split_fields(text, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    COHORT_CHECK(eq != std::string::npos) << "malformed clock record '" << item << "'";
    clocks[static_cast<uint32_t>(std::stoul(item.substr(0, eq)))] = std::stoll(item.substr(eq + 1));
  }
  return clocks;
}

Message make_snapshot(Partition& primary) {
  primary.drop_stale_marker();
  Message m(Op::replicate);
  m.header.partition = static_cast<uint32_t>(primary.id());
  m.header.version = primary.applied_version();
  m.header.aux = static_cast<uint64_t>(primary.marker_due());
  m.header.step = primary.marker_version();
  m.header.timeline = primary.timeline();
  m.add(encode_clocks(primary));
  // A commit of the state the replica has already: the marker alone.
  const bool records = !primary.marker_only();
  for (const auto& [key, const_shard] : primary.shards()) {
    if (!records) break;
    Shard& s = primary.shard(key);
    const bool partial = !s.dirty.empty() && s.replica_full;
    const uint64_t rows = partial ? s.dirty_rows.size() : static_cast<uint64_t>(s.info.rows());
    const ShardRecordHeader h = record_header(s, partial, rows);
    m.add(&h, sizeof h);
    m.add(s.spec.name);
    zmq::message_t data(record_data_bytes(s, rows));
    if (partial) {
      std::sort(s.dirty_rows.begin(), s.dirty_rows.end());
      m.add(std::span<const int64_t>(s.dirty_rows));
      gather_rows(s, s.dirty_rows, static_cast<std::byte*>(data.data()));
      for (int64_t r : s.dirty_rows) s.dirty[r] = false;
      s.dirty_rows.clear();
    } else {
      m.frames.emplace_back();  // no row list
      gather_all(s, static_cast<std::byte*>(data.data()));
      if (!s.dirty.empty()) {
        std::fill(s.dirty.begin(), s.dirty.end(), false);
        s.dirty_rows.clear();
      }
      s.replica_full = true;
    }
    m.frames.push_back(std::move(data));
  }
  primary.snapshot_sent();
  return m;
}

int64_t apply_snapshot(Partition& replica, Message& m) {
  COHORT_CHECK(!m.frames.empty() && (m.frames.size() - 1) % 4 == 0) << "malformed replica snapshot";
  for (size_t i = 1; i < m.frames.size(); i += 4) {
    ShardRecordHeader h;
    COHORT_CHECK_EQ(m.frames[i].size(), sizeof h) << "replica snapshot record header";
    std::memcpy(&h, m.frames[i].data(), sizeof h);
    const VariableSpec spec = record_spec(h, std::string(m.text(i + 1)));
    const ShardInfo info = record_info(h, replica.id());
    const uint64_t key = shard_key(h.variable, h.index);
    const auto& data = m.frames[i + 3];
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(data.data()), data.size());
    if (!replica.has(key)) {
      COHORT_CHECK(!h.partial) << "the first snapshot of '" << spec.name << "' shard " << h.index << " is partial";
      replica.declare(info, spec, bytes.first(static_cast<size_t>(info.rows() * spec.row_bytes())));
    }
    Shard& s = replica.shard(key);
    if (h.partial) {
      std::vector<int64_t> scratch;
      scatter_rows(s, m.row_ids(i + 2, scratch), bytes);
    } else {
      scatter_all(s, bytes);
    }
    s.updates = h.updates;
  }
  replica.reset_progress(m.header.version, decode_clocks(m.text(0)));
  replica.set_timeline(m.header.timeline);
  switch (static_cast<Partition::Marker>(m.header.aux)) {
    case Partition::Marker::keep:
      replica.replica_keeps_commit(m.header.step);
      break;
    case Partition::Marker::restore:
      replica.replica_restored(m.header.step);
      break;
    case Partition::Marker::none:
      break;
  }
  return m.header.version;
}

}  // namespace cohort::ps
