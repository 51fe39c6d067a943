#include "cohort/torch/checkpoint/elastic_shards.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cohort/common/check.h"
#include "cohort/common/logging.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {
namespace fs = std::filesystem;

namespace {

// The file's bytes, read once straight into the tensor that carries them.
at::Tensor read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  COHORT_CHECK(in) << "elastic: cannot read the commit's part " << path;
  at::Tensor bytes = at::empty({int64_t(in.tellg())}, at::kByte);
  in.seekg(0);
  in.read(static_cast<char*>(bytes.data_ptr()), std::streamsize(bytes.numel()));
  COHORT_CHECK(in) << "elastic: cannot read the commit's part " << path;
  return bytes;
}

void write_bytes(const std::string& path, const at::Tensor& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(bytes.data_ptr()), std::streamsize(bytes.numel()));
  out.close();
  COHORT_CHECK(out) << "elastic: cannot write the commit's part " << path << " (is /dev/shm full?)";
}

}  // namespace

ElasticShardFiles::ElasticShardFiles(std::function<void(ShardWriter&)> write,
                                     std::function<void(const ShardedCheckpoint&)> read)
    : write_(std::move(write)), read_(std::move(read)) {
  // Unique per process and instance: two sharded models keep apart.
  static std::atomic<int> instances{0};
  const char* job = std::getenv("COHORT_JOB_ID");
  prefix_ = std::string("/dev/shm/cohort-") + (job && *job ? job : "local") + "-elastic-" +
            std::to_string(::getpid()) + "." + std::to_string(instances++) + "-";
}

ElasticShardFiles::~ElasticShardFiles() {
  keep_newest(0);
  std::error_code ignored;
  fs::remove_all(prefix_ + "restore", ignored);
}

std::string ElasticShardFiles::path_of(const Part& p) const {
  return prefix_ + "g" + std::to_string(p.generation) + "-s" + std::to_string(p.serial) + "-p" +
         std::to_string(p.part) + "of" + std::to_string(p.world);
}

const ElasticShardFiles::Part* ElasticShardFiles::find(int64_t serial, int64_t world, int64_t part) const {
  for (auto c = commits_.rbegin(); c != commits_.rend(); ++c)
    for (const Part& p : *c)
      if (p.serial == serial && p.world == world && p.part == part) return &p;
  return nullptr;
}

void ElasticShardFiles::keep_newest(size_t keep) {
  while (commits_.size() > keep) {
    for (const Part& p : commits_.front()) ::unlink(path_of(p).c_str());
    commits_.erase(commits_.begin());
  }
}

void ElasticShardFiles::commit(int64_t serial) {
  const int64_t world = initialized() ? size() : 1, me = initialized() ? rank() : 0;
  // Its files are this member's to remove from now on, whatever happens.
  commits_.push_back({Part{generation_++, serial, world, me}});
  const Part own = commits_.back()[0];
  std::exception_ptr error;
  try {
    ShardWriter out(path_of(own));
    write_(out);
    out.commit();
  } catch (...) {
    error = std::current_exception();
  }
  if (world > 1) {
    // Every member wrote its part, or none goes on to the exchange (which
    // would wait for the one that could not).
    const bool all = allreduce(at::tensor({error ? int64_t(0) : int64_t(1)}),
                               {.name = "elastic.parts_written", .op = ReduceOp::min})
                         .item<int64_t>() == 1;
    if (error) std::rethrow_exception(error);
    COHORT_CHECK(all) << "elastic: another member could not write its part of commit " << serial
                      << " (its error says why)";
    // This member's part to the next one; the previous one's here.
    const at::Tensor mine = read_bytes(path_of(own));
    // By allgather: the engine's uneven alltoall pads every block to the
    // largest, zeros and all, and took twice as long (see the header).
    const at::Tensor lengths = allgather(at::tensor({mine.numel()}, at::kLong), {.name = "elastic.part_lengths"});
    const at::Tensor parts = allgather(mine, {.name = "elastic.part_copy"});
    const int64_t prev = (me + world - 1) % world;
    const at::Tensor copy =
        parts.narrow(0, lengths.narrow(0, 0, prev).sum().item<int64_t>(), lengths[prev].item<int64_t>());
    const Part theirs{own.generation, serial, world, prev};
    commits_.back().push_back(theirs);
    write_bytes(path_of(theirs), copy);
  } else if (error) {
    std::rethrow_exception(error);
  }
  keep_newest(2);
}

int64_t ElasticShardFiles::restore(int64_t serial_if_none) {
  const int64_t world = initialized() ? size() : 1, me = initialized() ? rank() : 0;
  // Every member's holdings, a row [member, serial, world, part] per part
  // file (members hold different numbers of them).
  std::vector<int64_t> held;
  for (const auto& parts : commits_)
    for (const Part& p : parts) held.insert(held.end(), {me, p.serial, p.world, p.part});
  const at::Tensor mine = at::tensor(held, at::kLong).reshape({-1, 4});
  const at::Tensor all = world > 1 ? allgather(mine, {.name = "elastic.parts_held"}) : mine;
  // Per commit (serial, world): each part's holders, lowest first.
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, std::set<int>>> holders;
  const auto table = all.accessor<int64_t, 2>();
  for (int64_t row = 0; row < table.size(0); ++row)
    holders[{table[row][1], table[row][2]}][table[row][3]].insert(int(table[row][0]));
  if (holders.empty()) {
    // Nobody committed yet: the state is everyone's as prepared.
    commit(serial_if_none);
    return serial_if_none;
  }
  const std::pair<int64_t, int64_t>* chosen = nullptr;
  for (auto it = holders.rbegin(); it != holders.rend() && !chosen; ++it)
    if (int64_t(it->second.size()) == it->first.second) chosen = &it->first;
  if (!chosen) {
    const auto& [newest, parts] = *holders.rbegin();
    COHORT_THROW(Error) << "elastic: commit " << newest.first << " of a world of " << newest.second
                        << " lost parts (the members holding a part and its copy died together); only "
                        << parts.size() << " of its " << newest.second
                        << " parts are left, and no older commit is whole";
  }
  const auto [serial, old_world] = *chosen;
  // Every part into a checkpoint of them all: a part this member holds is
  // linked in (tmpfs: no copy), one it lacks comes from its lowest holder,
  // one at a time; parts every member holds travel nowhere.
  const std::string dir = prefix_ + "restore";
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  fs::create_directories(dir);
  for (const auto& [part, by] : holders.at(*chosen)) {
    const std::string path = shard_path(dir, int(part), int(old_world), uint64_t(serial));
    const Part* own = by.count(int(me)) ? find(serial, old_world, part) : nullptr;
    COHORT_CHECK(!by.count(int(me)) || own != nullptr)
        << "elastic: part " << part << " of commit " << serial << " went missing";
    if (own) fs::create_hard_link(path_of(*own), path);
    if (int64_t(by.size()) == world) continue;
    const int holder = *by.begin();
    at::Tensor bytes = holder == me ? read_bytes(path_of(*own)) : at::Tensor();
    const at::Tensor length = broadcast(at::tensor({bytes.defined() ? bytes.numel() : int64_t(0)}, at::kLong),
                                        {.name = "elastic.part_length", .root = holder});
    if (!bytes.defined()) bytes = at::empty({length.item<int64_t>()}, at::kByte);
    bytes = broadcast(bytes, {.name = "elastic.part", .root = holder});
    if (!own) write_bytes(path, bytes);
  }
  write_manifest(dir, int(old_world), uint64_t(serial));
  {
    const ShardedCheckpoint in(dir);
    read_(in);
  }
  // Every member now holds the whole commit: kept so, under this member's
  // names, in place of the commits before it (newer ones are not whole, and
  // the work after this one is redone), until two commits in this world's
  // layout replace it. No death before then can lose it, and no commit in
  // the new layout is needed now.
  std::vector<Part> whole;
  const int64_t generation = generation_++;
  try {
    for (int64_t part = 0; part < old_world; ++part) {
      const Part kept{generation, serial, old_world, part};
      fs::create_hard_link(shard_path(dir, int(part), int(old_world), uint64_t(serial)), path_of(kept));
      whole.push_back(kept);
    }
  } catch (...) {
    for (const Part& p : whole) ::unlink(path_of(p).c_str());
    throw;
  }
  keep_newest(0);
  commits_.push_back(std::move(whole));
  fs::remove_all(dir, ignored);
  COHORT_LOG(info) << "elastic: restored commit " << serial << " of a world of " << old_world << " in a world of "
                   << world;
  return serial;
}

}  // namespace cohort
