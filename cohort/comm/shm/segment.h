// The shared-memory segment of one shm communicator: its layout, and the
// create/attach/unlink protocol through the Store.
//
// Layout (every part cache-line aligned):
//   Header                                   magic, geometry, abort record
//   RankControl[size]                        step flag, op signatures, pid, departure
//   staging slots [size][2][slot_bytes]      collectives, double buffered
//   Channel[size][size] (src, dst), src!=dst point to point, double buffered
//
// Rendezvous through the Store: every rank first announces that it has
// joined; rank 0 creates the segment only once all have, with mode 0600 under
// the name /cohort-<job_id>-<pid>-<random>, publishes the name, and unlinks
// it as soon as every rank has mapped it. So a rank whose peers never start
// creates nothing, and the name exists only for the moment it takes ranks
// that are all running to map it; an exception in that moment unlinks it
// too. Its size depends on the number of ranks and slot_bytes, never on the
// messages.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cohort/comm/shm/wait.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm::shm {

inline constexpr size_t kCacheLine = 64;
inline constexpr uint64_t kMagic = 0x74726f686f63ull;  // "cohort"
inline constexpr uint32_t kLayoutVersion = 2;

// What a rank is doing in a step, compared by the ranks that wait on it.
struct Signature {
  uint64_t what = 0;   // kind | dtype << 8 | op << 16 | (root + 1) << 24
  uint64_t count = 0;  // elements (or 0 where ranks legitimately differ)
  bool operator==(const Signature&) const = default;
};

// The signature of one step, tagged with the step's number so that a reader
// can tell it apart from a later step that reused the entry.
struct SignatureEntry {
  std::atomic<uint32_t> step{~0u};
  std::atomic<uint64_t> what{0};
  std::atomic<uint64_t> count{0};
};

// Ranks that wait on nothing can run at most three steps ahead of a rank
// still checking a signature (a writer's pre-write wait bounds them), so
// four entries are never overwritten while needed.
inline constexpr int kSignatureEntries = 4;

// How a rank left its communicator, stored once by its destructor after its
// last published step (release): a reader that sees the departure (acquire)
// also sees every step the rank published, so "left" can be told apart from
// "left before publishing what I need".
enum class Departure : uint32_t { present = 0, destroyed = 1, on_exception = 2 };

struct alignas(kCacheLine) RankControl {
  Flag step;  // steps this rank has published
  SignatureEntry signatures[kSignatureEntries];  // indexed by step % 4
  int32_t pid = 0;
  std::atomic<uint32_t> departed{0};  // a Departure
};

enum class AbortKind : int32_t { error = 0, mismatch = 1, timeout = 2, peer_lost = 3 };

// Why a group stopped: written once, by the first rank that finds a failure.
// `state` is the record's only synchronisation. A rank claims the record by
// swapping 0 for abort_claimed_by(rank), writes the fields, and publishes
// them with one release store of abort_published_by(rank). A reader that
// finds a claim never published knows who holds it, so a claimer killed (or
// stopped) while writing is named rather than waited for forever.
struct AbortRecord {
  std::atomic<uint32_t> state{0};
  int32_t kind = 0;       // AbortKind
  int32_t culprit = -1;   // rank blamed: for peer_lost the rank that died or left
  int32_t reporter = -1;  // rank that wrote the record
  char message[2048] = {};
};

inline constexpr uint32_t abort_claimed_by(int rank) { return uint32_t(rank + 1) << 1; }
inline constexpr uint32_t abort_published_by(int rank) { return abort_claimed_by(rank) | 1u; }
inline constexpr bool abort_published(uint32_t state) { return state & 1u; }
inline constexpr int abort_claimer(uint32_t state) { return int(state >> 1) - 1; }  // -1: unclaimed

struct ChunkMeta {
  uint32_t tag = 0;
  uint32_t dtype = 0;
  uint64_t total_bytes = 0;  // of the whole message
};

// One direction between two ranks. `sent` counts chunks the sender has
// published, `taken` chunks the receiver has consumed.
struct alignas(kCacheLine) Channel {
  Flag sent;
  alignas(kCacheLine) Flag taken;
  alignas(kCacheLine) ChunkMeta meta[2];
};

struct alignas(kCacheLine) Header {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t size = 0;
  uint64_t slot_bytes = 0;
  uint64_t channel_bytes = 0;  // payload per channel buffer
  uint64_t total_bytes = 0;
  alignas(kCacheLine) AbortRecord abort;
};

struct Geometry {
  int size = 0;
  size_t slot_bytes = 0;
  size_t channel_bytes = 0;

  // The communicator's geometry for `size` ranks and COHORT_SHM_SLOT_BYTES
  // `slot_bytes`: what its segment takes of /dev/shm (cohortrun --check).
  static Geometry for_group(int size, size_t slot_bytes);

  size_t control_offset() const;
  size_t slots_offset() const;
  size_t channels_offset() const;
  size_t channel_stride() const;  // Channel header + 2 buffers
  size_t total_bytes() const;
};

// A mapped segment. Move-only; unmaps on destruction.
class Segment {
 public:
  // Collective over the `size` ranks sharing `store`: all join, rank 0
  // creates, the others attach, rank 0 unlinks once all have attached.
  // `world_ranks` names the ranks in errors: a TimeoutError lists the ranks
  // that never joined (or joined but never attached).
  static Segment rendezvous(rendezvous::Store& store, int rank, const Geometry& geometry,
                            const std::string& job_id, rendezvous::Duration timeout,
                            std::span<const int> world_ranks);

  Segment() = default;
  Segment(Segment&&) noexcept;
  Segment& operator=(Segment&&) noexcept;
  ~Segment();

  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  RankControl& control(int rank) const {
    return reinterpret_cast<RankControl*>(base_ + geometry_.control_offset())[rank];
  }
  std::byte* slot(int rank, int buffer) const {
    return base_ + geometry_.slots_offset() + (size_t(rank) * 2 + buffer) * geometry_.slot_bytes;
  }
  Channel& channel(int src, int dst) const {
    return *reinterpret_cast<Channel*>(channel_base(src, dst));
  }
  std::byte* channel_buffer(int src, int dst, int buffer) const {
    return channel_base(src, dst) + sizeof(Channel) + size_t(buffer) * geometry_.channel_bytes;
  }
  const Geometry& geometry() const { return geometry_; }
  const std::string& name() const { return name_; }

 private:
  std::byte* channel_base(int src, int dst) const {
    return base_ + geometry_.channels_offset() +
           (size_t(src) * geometry_.size + dst) * geometry_.channel_stride();
  }
  std::byte* base_ = nullptr;
  size_t length_ = 0;
  Geometry geometry_;
  std::string name_;
};

}  // namespace cohort::comm::shm
