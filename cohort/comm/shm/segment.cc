#include "cohort/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <string_view>
#include <vector>

#include "cohort/comm/messages.h"
#include "cohort/common/check.h"
#include "cohort/common/logging.h"

namespace cohort::comm::shm {
namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
constexpr size_t kPage = 4096;

std::string random_suffix() {
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Job ids come from the environment; keep segment names to a safe alphabet.
std::string sanitise(std::string_view s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "local" : out;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

Geometry Geometry::for_group(int size, size_t slot_bytes) {
  const size_t slot = slot_bytes - slot_bytes % kCacheLine;
  return Geometry{size, slot, std::max<size_t>(4096, slot / 2)};
}

size_t Geometry::control_offset() const { return align_up(sizeof(Header), kCacheLine); }
size_t Geometry::slots_offset() const {
  return align_up(control_offset() + sizeof(RankControl) * size, kPage);
}
size_t Geometry::channels_offset() const { return slots_offset() + size_t(size) * 2 * slot_bytes; }
size_t Geometry::channel_stride() const { return align_up(sizeof(Channel) + 2 * channel_bytes, kPage); }
size_t Geometry::total_bytes() const {
  return channels_offset() + size_t(size) * size * channel_stride();
}

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    this->~Segment();
    base_ = std::exchange(o.base_, nullptr);
    length_ = std::exchange(o.length_, 0);
    geometry_ = o.geometry_;
    name_ = std::move(o.name_);
  }
  return *this;
}

Segment::~Segment() {
  if (base_) munmap(base_, length_);
  base_ = nullptr;
}

namespace {

std::string joined_key(int rank) { return "shm/joined/" + std::to_string(rank); }
std::string attached_key(int rank) { return "shm/attached/" + std::to_string(rank); }

// The world ranks r in [first, size) whose `key(r)` is not in the store.
template <typename Key>
std::vector<int> missing_ranks(rendezvous::Store& store, const Key& key, int first, std::span<const int> world_ranks) {
  std::vector<int> missing;
  for (int r = first; r < int(world_ranks.size()); ++r) {
    const std::string k = key(r);
    if (!store.check(std::span(&k, 1))) missing.push_back(world_ranks[r]);
  }
  return missing;
}

// Waits until `key(r)` is set for every r in [first, size); on a timeout
// returns the world ranks still missing (empty when all arrived).
template <typename Key>
std::vector<int> wait_for_ranks(rendezvous::Store& store, const Key& key, int first, std::span<const int> world_ranks,
                                rendezvous::Duration timeout) {
  std::vector<std::string> keys;
  for (int r = first; r < int(world_ranks.size()); ++r) keys.push_back(key(r));
  try {
    store.wait(keys, timeout);
    return {};
  } catch (const TimeoutError&) {
    return missing_ranks(store, key, first, world_ranks);
  }
}

[[noreturn]] void throw_never_joined(std::span<const int> missing, size_t size, rendezvous::Duration timeout) {
  throw TimeoutError(ranks_text(missing) + " of " + std::to_string(size) + " never joined within " +
                     seconds_text(timeout) +
                     ": did they start? Check the launcher's command line or hostfile: every rank needs the same "
                     "size and store address (COHORT_TIMEOUT_S sets how long to wait)");
}

}  // namespace

Segment Segment::rendezvous(rendezvous::Store& store, int rank, const Geometry& wanted, const std::string& job_id,
                            rendezvous::Duration timeout, std::span<const int> world_ranks) {
  COHORT_CHECK_EQ(world_ranks.size(), size_t(wanted.size));
  Segment seg;
  // Nothing is created until every rank is known to run: a rank whose peers
  // never start must not leave a segment behind, however it ends.
  store.set(joined_key(rank), "1");
  if (rank == 0) {
    if (auto missing = wait_for_ranks(store, joined_key, 1, world_ranks, timeout); !missing.empty())
      throw_never_joined(missing, world_ranks.size(), timeout);
    seg.geometry_ = wanted;
    seg.length_ = wanted.total_bytes();
    seg.name_ = "/cohort-" + sanitise(job_id) + "-" + std::to_string(getpid()) + "-" + random_suffix();
    const int fd = shm_open(seg.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    COHORT_CHECK(fd >= 0) << "cannot create shared memory segment " << seg.name_ << ": " << errno_text();
    // Until the unlink below the name is in /dev/shm. Every error unlinks it
    // here, not in a destructor: an exception that no one catches ends the
    // program without unwinding the stack. (A signal in this short window is
    // left to cohortrun, which removes /dev/shm/cohort-<job_id>-* at exit.)
    try {
      const int rc = ftruncate(fd, static_cast<off_t>(seg.length_));
      const int saved = errno;
      if (rc != 0) close(fd);
      COHORT_CHECK(rc == 0) << "cannot size shared memory segment " << seg.name_ << " to " << seg.length_
                            << " bytes: " << std::strerror(saved) << " (is /dev/shm full?)";
      void* p = mmap(nullptr, seg.length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      COHORT_CHECK(p != MAP_FAILED) << "cannot map " << seg.name_ << ": " << errno_text();
      seg.base_ = static_cast<std::byte*>(p);
      Header* h = new (seg.base_) Header();
      h->version = kLayoutVersion;
      h->size = static_cast<uint32_t>(wanted.size);
      h->slot_bytes = wanted.slot_bytes;
      h->channel_bytes = wanted.channel_bytes;
      h->total_bytes = seg.length_;
      for (int r = 0; r < wanted.size; ++r) new (&seg.control(r)) RankControl();
      for (int s = 0; s < wanted.size; ++s)
        for (int d = 0; d < wanted.size; ++d)
          if (s != d) new (&seg.channel(s, d)) Channel();
      seg.control(0).pid = getpid();
      std::atomic_ref<uint64_t>(h->magic).store(kMagic, std::memory_order_release);
      // A namespace serves one communicator; a reused one would hand stale
      // names to the other ranks.
      const std::string held = store.compare_set("shm/segment", "", seg.name_);
      COHORT_CHECK_AS(ConfigError, held == seg.name_)
          << "the store namespace already holds a communicator (segment " << held
          << "); give each communicator its own PrefixStore";
      if (auto missing = wait_for_ranks(store, attached_key, 1, world_ranks, timeout); !missing.empty())
        throw TimeoutError(ranks_text(missing) + " of " + std::to_string(world_ranks.size()) +
                           " joined but never mapped the shared-memory segment within " + seconds_text(timeout) +
                           ": did they crash? (are all ranks on the same host?)");
    } catch (...) {
      shm_unlink(seg.name_.c_str());
      throw;
    }
    shm_unlink(seg.name_.c_str());
    return seg;
  }

  try {
    seg.name_ = store.get("shm/segment", timeout);
  } catch (const TimeoutError&) {
    // Name the ranks that are missing, rank 0 included; if every rank joined,
    // rank 0 stopped between its wait and publishing the name.
    const auto missing = missing_ranks(store, joined_key, 0, world_ranks);
    if (!missing.empty()) throw_never_joined(missing, world_ranks.size(), timeout);
    throw TimeoutError("rank " + std::to_string(world_ranks[0]) + " did not publish the shared-memory segment within " +
                       seconds_text(timeout) + " although every rank joined");
  }
  const int fd = shm_open(seg.name_.c_str(), O_RDWR, 0);
  COHORT_CHECK(fd >= 0) << "cannot open shared memory segment " << seg.name_
                        << " created by rank 0: " << errno_text()
                        << " (are all ranks on the same host?)";
  struct stat st {};
  fstat(fd, &st);
  seg.length_ = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, seg.length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  COHORT_CHECK(p != MAP_FAILED) << "cannot map " << seg.name_ << ": " << errno_text();
  seg.base_ = static_cast<std::byte*>(p);
  const Header& h = seg.header();
  COHORT_CHECK(std::atomic_ref<uint64_t>(const_cast<uint64_t&>(h.magic)).load(std::memory_order_acquire) ==
               kMagic)
      << "segment " << seg.name_ << " is not a cohort segment";
  COHORT_CHECK_EQ(h.version, kLayoutVersion) << "segment " << seg.name_ << " has another layout version";
  COHORT_CHECK_EQ(h.total_bytes, seg.length_) << "segment " << seg.name_ << " has an unexpected size";
  COHORT_CHECK_EQ(int(h.size), wanted.size) << "ranks disagree on the communicator size";
  // Rank 0's geometry wins (its COHORT_SHM_SLOT_BYTES), so ranks with
  // different environments still agree.
  seg.geometry_ = Geometry{wanted.size, h.slot_bytes, h.channel_bytes};
  seg.control(rank).pid = getpid();
  store.set(attached_key(rank), "1");
  return seg;
}

}  // namespace cohort::comm::shm
