#include "cohort/parameter_server/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"
#include "cohort/parameter_server/shard_record.h"
#include "cohort/parameter_server/wire.h"

namespace cohort::ps {

namespace {

constexpr char kFileMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'P', 'S'};
constexpr const char* kManifestHeader = "cohort-ps-checkpoint 1";

uint32_t crc_of(const std::byte* data, size_t n, uint32_t crc = 0) {
  // zlib's crc32 takes at most 4 GiB - 1 per call.
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk));
    data += chunk;
    n -= chunk;
  }
  return crc;
}

void read_at(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    COHORT_CHECK_AS(ConfigError, r > 0) << "checkpoint " << path << " is truncated or unreadable at byte " << offset
                                        << (r < 0 ? std::string(": ") + std::strerror(errno) : std::string());
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// Synced, files and manifest: the manifest is the commit point of state
// that cost the whole job's training, and it must never name shard files a
// power cut emptied.
constexpr AtomicFileOptions kDurable{.durability = Durability::fsync_file_and_dir, .buffer_bytes = size_t(1) << 20};

}  // namespace

std::string CheckpointEntry::encode() const {
  std::ostringstream s;
  s << "entry\t" << variable << '\t' << dtype_name(dtype) << '\t' << rows << '\t' << cols << '\t' << row_begin << '\t'
    << row_end << '\t' << updates << '\t' << slots << '\t' << file << '\t' << offset << '\t' << bytes << '\t' << crc;
  return s.str();
}

CheckpointEntry CheckpointEntry::decode(const std::string& line) {
  const auto f = split_fields(line, '\t');
  COHORT_CHECK_AS(ConfigError, f.size() == 13 && f[0] == "entry") << "malformed manifest line '" << line << "'";
  CheckpointEntry e;
  try {
    e.variable = f[1];
    e.dtype = parse_dtype(f[2]);
    e.rows = std::stoll(f[3]);
    e.cols = std::stoll(f[4]);
    e.row_begin = std::stoll(f[5]);
    e.row_end = std::stoll(f[6]);
    e.updates = std::stoll(f[7]);
    e.slots = std::stoi(f[8]);
    e.file = f[9];
    e.offset = std::stoull(f[10]);
    e.bytes = std::stoull(f[11]);
    e.crc = static_cast<uint32_t>(std::stoul(f[12]));
  } catch (const std::logic_error&) {
    COHORT_THROW(ConfigError) << "malformed manifest line '" << line << "'";
  }
  COHORT_CHECK_AS(ConfigError, e.row_begin >= 0 && e.row_begin <= e.row_end && e.row_end <= e.rows && e.cols >= 1 &&
                                   e.file.find('/') == std::string::npos)
      << "malformed manifest line '" << line << "'";
  return e;
}

std::vector<CheckpointEntry> save_partition(const Partition& partition, const std::string& dir,
                                            const std::string& file) {
  ::mkdir(dir.c_str(), 0755);
  AtomicFile out(dir + "/" + file, kDurable);
  out.write(kFileMagic, sizeof kFileMagic);
  std::vector<CheckpointEntry> entries;
  for (const auto& [key, s] : partition.shards()) {
    const ShardRecordHeader h = record_header(s, false, static_cast<uint64_t>(s.info.rows()));
    out.write(&h, sizeof h);
    out.write(s.spec.name.data(), s.spec.name.size());
    CheckpointEntry e{.variable = s.spec.name,
                      .dtype = s.spec.dtype,
                      .rows = s.spec.rows,
                      .cols = s.spec.cols,
                      .row_begin = s.info.row_begin,
                      .row_end = s.info.row_end,
                      .updates = s.updates,
                      .slots = static_cast<int>(s.slots.size()),
                      .file = file,
                      .offset = out.size(),
                      .bytes = s.values.size() * (1 + s.slots.size())};
    uint32_t crc = crc_of(s.values.data(), s.values.size());
    out.write(s.values.data(), s.values.size());
    for (const Bytes& slot : s.slots) {
      crc = crc_of(slot.data(), slot.size(), crc);
      out.write(slot.data(), slot.size());
    }
    e.crc = crc;
    entries.push_back(std::move(e));
  }
  out.commit();
  return entries;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  std::ostringstream text;
  text << kManifestHeader << " step=" << m.step << " rule=" << m.rule << '\n';
  for (const auto& e : m.entries) text << e.encode() << '\n';
  write_file_atomically(dir + "/manifest", text.str(), kDurable);
}

bool has_manifest(const std::string& dir) { return ::access((dir + "/manifest").c_str(), R_OK) == 0; }

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest";
  std::ifstream in(path);
  COHORT_CHECK_AS(ConfigError, in.good()) << "no parameter-server checkpoint at " << dir << " (cannot read " << path
                                          << ")";
  std::string line;
  std::getline(in, line);
  Manifest m;
  COHORT_CHECK_AS(ConfigError, line.starts_with(kManifestHeader))
      << path << " is not a cohort parameter-server manifest (first line '" << line << "')";
  std::istringstream header(line.substr(std::strlen(kManifestHeader)));
  for (std::string field; header >> field;) {
    if (field.starts_with("step=")) m.step = std::stoll(field.substr(5));
    if (field.starts_with("rule=")) m.rule = field.substr(5);
  }
  while (std::getline(in, line))
    if (!line.empty()) m.entries.push_back(CheckpointEntry::decode(line));
  return m;
}

void load_partition(Partition& partition, const std::string& dir, const Manifest& manifest) {
  const int want_slots = slot_count(partition.config().optimizer);
  for (const auto& [key, const_shard] : partition.shards()) {
    Shard& s = partition.shard(key);
    const size_t rb = static_cast<size_t>(s.row_bytes());
    int64_t covered = 0, updates = 0;
    for (const CheckpointEntry& e : manifest.entries) {
      if (e.variable != s.spec.name) continue;
      COHORT_CHECK_AS(ConfigError, e.rows == s.spec.rows && e.cols == s.spec.cols && e.dtype == s.spec.dtype)
          << "checkpoint " << dir << " holds '" << e.variable << "' as " << e.rows << "x" << e.cols << " "
          << dtype_name(e.dtype) << ", but the model has " << s.spec.rows << "x" << s.spec.cols << " "
          << dtype_name(s.spec.dtype);
      COHORT_CHECK_AS(ConfigError, e.slots == want_slots)
          << "checkpoint " << dir << " was saved with optimizer=" << manifest.rule << " (" << e.slots
          << " state buffers per variable); this job's optimizer keeps " << want_slots;
      const int64_t begin = std::max(e.row_begin, s.info.row_begin), end = std::min(e.row_end, s.info.row_end);
      if (begin >= end) continue;
      const std::string path = dir + "/" + e.file;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      COHORT_CHECK_AS(ConfigError, fd >= 0) << "checkpoint file " << path << ": " << std::strerror(errno);
      Bytes data(e.bytes);
      try {
        read_at(fd, data.data(), data.size(), e.offset, path);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      COHORT_CHECK_AS(ConfigError, crc_of(data.data(), data.size()) == e.crc)
          << "checkpoint file " << path << " is corrupt: CRC-32 of '" << e.variable << "' rows [" << e.row_begin
          << ", " << e.row_end << ") differs from the manifest's";
      const size_t entry_rows = static_cast<size_t>(e.row_end - e.row_begin);
      COHORT_CHECK_AS(ConfigError, data.size() == entry_rows * rb * (1 + s.slots.size()))
          << "checkpoint entry of '" << e.variable << "' in " << path << " has the wrong size";
      // Section k (values, then each slot) of the entry, rows [begin, end).
      auto copy_section = [&](size_t k, Bytes& dst) {
        std::memcpy(dst.data() + (begin - s.info.row_begin) * rb,
                    data.data() + k * entry_rows * rb + (begin - e.row_begin) * rb, (end - begin) * rb);
      };
      copy_section(0, s.values);
      for (size_t k = 0; k < s.slots.size(); ++k) copy_section(k + 1, s.slots[k]);
      covered += end - begin;
      updates = std::max(updates, e.updates);
    }
    COHORT_CHECK_AS(ConfigError, covered == s.info.rows())
        << "checkpoint " << dir << " covers " << covered << " of the " << s.info.rows() << " rows ["
        << s.info.row_begin << ", " << s.info.row_end << ") of '" << s.spec.name << "'";
    s.updates = updates;
    if (!s.dirty.empty()) s.replica_full = false;
  }
  partition.reset_progress(manifest.step, {});
}

}  // namespace cohort::ps
