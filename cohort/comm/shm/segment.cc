#include "cohort/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <string_view>

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

Segment Segment::rendezvous(rendezvous::Store& store, int rank, const Geometry& wanted,
                            const std::string& job_id, rendezvous::Duration timeout) {
  Segment seg;
  if (rank == 0) {
    seg.geometry_ = wanted;
    seg.length_ = wanted.total_bytes();
    seg.name_ = "/cohort-" + sanitise(job_id) + "-" + std::to_string(getpid()) + "-" + random_suffix();
    const int fd = shm_open(seg.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    COHORT_CHECK(fd >= 0) << "cannot create shared memory segment " << seg.name_ << ": " << errno_text();
    // From here until the unlink below, a crash would leave the name in
    // /dev/shm; cohortrun removes /dev/shm/cohort-<job_id>-* as a backstop.
    struct Unlinker {
      const std::string& name;
      bool armed = true;
      ~Unlinker() { if (armed) shm_unlink(name.c_str()); }
    } unlinker{seg.name_};
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
    std::vector<std::string> attached;
    for (int r = 1; r < wanted.size; ++r) attached.push_back("shm/attached/" + std::to_string(r));
    store.wait(attached, timeout);
    shm_unlink(seg.name_.c_str());
    unlinker.armed = false;
    return seg;
  }

  seg.name_ = store.get("shm/segment", timeout);
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
  store.set("shm/attached/" + std::to_string(rank), "1");
  return seg;
}

}  // namespace cohort::comm::shm
