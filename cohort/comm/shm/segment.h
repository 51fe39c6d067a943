// The shared-memory segment of one shm communicator: its layout, and the
// create/attach/unlink protocol through the Store.
//
// Layout (every part cache-line aligned):
//   Header                                   magic, geometry, abort record
//   RankControl[size]                        step flag, op signatures, pid, departed
//   staging slots [size][2][slot_bytes]      collectives, double buffered
//   Channel[size][size] (src, dst), src!=dst point to point, double buffered
//
// The segment is created by rank 0 with mode 0600 under the name
// /cohort-<job_id>-<pid>-<random>, published in the store, attached by the
// others, and unlinked as soon as every rank has mapped it: from then on
// nothing can leak into /dev/shm, whatever happens to the processes. Its size
// depends on the number of ranks and slot_bytes, never on the messages.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/shm/wait.h"
#include "cohort/rendezvous/store.h"

namespace cohort::comm::shm {

inline constexpr size_t kCacheLine = 64;
inline constexpr uint64_t kMagic = 0x74726f686f63ull;  // "cohort"
inline constexpr uint32_t kLayoutVersion = 1;

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

struct alignas(kCacheLine) RankControl {
  Flag step;  // steps this rank has published
  SignatureEntry signatures[kSignatureEntries];  // indexed by step % 4
  int32_t pid = 0;
  std::atomic<uint32_t> departed{0};  // set when the rank destroys its communicator
};

// Why a group stopped: set once, by the first rank that fails.
struct AbortRecord {
  std::atomic<uint32_t> state{0};  // 0 none, 1 being written, 2 complete
  int32_t rank = -1;
  int32_t kind = 0;  // AbortKind
  char message[2048] = {};
};

enum class AbortKind : int32_t { error = 0, mismatch = 1, timeout = 2, peer_lost = 3 };

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

  size_t control_offset() const;
  size_t slots_offset() const;
  size_t channels_offset() const;
  size_t channel_stride() const;  // Channel header + 2 buffers
  size_t total_bytes() const;
};

// A mapped segment. Move-only; unmaps on destruction.
class Segment {
 public:
  // Collective over the `size` ranks sharing `store`: rank 0 creates, the
  // others attach, rank 0 unlinks once all have attached.
  static Segment rendezvous(rendezvous::Store& store, int rank, const Geometry& geometry,
                            const std::string& job_id, rendezvous::Duration timeout);

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
