// The messages workers and servers exchange.
//
// A message is one ZeroMQ multipart message: a fixed 80-byte Header frame,
// then the op's payload frames (values, row ids, text). Replies reuse the
// request's header with status, version and settled filled in, so a reply
// names the request it answers (request_id) without any other state.
// Integers are little-endian (the only byte order cohort builds for).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "cohort/parameter_server/transport_options.h"

namespace cohort::ps {

static_assert(std::endian::native == std::endian::little, "the parameter-server wire format is little-endian");

enum class Op : uint16_t {
  hello = 1,   // worker -> partition: learn version and own clock
  join,        // worker -> partition: step = first step whose requests follow; becomes live
  declare,     // create a shard with initial values (ignored when it exists)
  push,        // dense gradient of (shard, step), staged until commit
  push_rows,   // row-sparse gradient: frames ids (int64), values
  pull,        // dense values once the clock `step` is allowed to read
  pull_rows,   // frame ids (int64); reply frame values
  push_pull,   // push, then reply with the values at clock step + 1
  commit,      // the worker finished step `step` on this partition
  ping,        // liveness (to a server); replies at once
  bye,         // the worker leaves cleanly
  save,        // partition: write a checkpoint file (text frame: path)
  load,        // partition: fill shards from a checkpoint (text frame: dir)
  replicate,   // server -> server: snapshot of a partition's shards
  promote,     // worker -> successor: take over partition (frames: shard specs)
  stats,       // server counters as text
  shutdown,    // stop serving (from the chief once every worker is done)
  keep_commit,     // partition: keep the state at version `step` as a commit (elastic jobs)
  restore_commit,  // partition: back to the commit at version `step` (text frame: live workers)
};
const char* op_name(Op op);

enum class Status : uint16_t { ok = 0, error = 1, stale = 2, unknown_partition = 3 };

inline constexpr uint32_t kWireMagic = 0x31535043;  // "CPS1"
inline constexpr uint32_t kNoPartition = 0xffffffffu;

struct Header {
  uint32_t magic = kWireMagic;
  uint16_t op = 0;
  uint16_t status = 0;
  uint64_t request_id = 0;
  uint32_t worker = kNoWorker;
  uint32_t incarnation = 0;
  uint32_t partition = kNoPartition;
  uint32_t variable = 0;
  uint32_t shard = 0;
  uint32_t dtype = 0;
  int64_t step = 0;     // the sender's clock, or the step a push belongs to
  int64_t version = 0;  // replies: the partition's visible version
  int64_t settled = 0;  // replies: this worker's steps the partition will never need again
  uint64_t count = 0;   // elements or rows
  uint64_t aux = 0;     // op specific
  // The worker's timeline when the request was made: an elastic restore
  // starts a new one, and a partition refuses steps of an older one (a
  // retained push replayed after the restore). Snapshots: the partition's.
  uint64_t timeline = 0;

  Op kind() const { return static_cast<Op>(op); }
};
static_assert(sizeof(Header) == 88);

struct Message {
  Header header;
  std::vector<zmq::message_t> frames;  // payload frames after the header

  Message() = default;
  explicit Message(Op op) { header.op = static_cast<uint16_t>(op); }
  Message(Message&&) = default;
  Message& operator=(Message&&) = default;

  Op kind() const { return header.kind(); }
  // A copy sharing the payloads (ZeroMQ reference-counts large frames).
  Message share();

  void add(const void* data, size_t bytes) { frames.emplace_back(data, bytes); }
  void add(std::string_view text) { frames.emplace_back(text.data(), text.size()); }
  template <typename T>
  void add(std::span<const T> values) {
    frames.emplace_back(values.data(), values.size_bytes());
  }
  std::string_view text(size_t i) const {
    return {static_cast<const char*>(frames.at(i).data()), frames.at(i).size()};
  }
  // Frame i as int64 row ids. ZeroMQ may hand a received frame over inside
  // its decoder's buffer, at any byte offset, and reading int64_t through a
  // misaligned pointer is undefined: such a frame is copied into `scratch`
  // first (an aligned one is viewed in place). ConfigError when the frame is
  // not a whole number of ids.
  std::span<const int64_t> row_ids(size_t i, std::vector<int64_t>& scratch) const;
};

// Sends header and frames on `socket`, after `route` (the ROUTER's peer id)
// when it is not empty. Never blocks (the sockets have no high-water mark).
void send_message(zmq::socket_t& socket, Message& message, std::string_view route = {});

// Receives one whole message; nullopt when none is waiting. With
// `routed`, the first frame is the peer id, returned in `route`. A message
// whose header frame is malformed is returned with magic 0.
bool receive_message(zmq::socket_t& socket, Message& message, bool routed, std::string* route);

// Little helpers to carry small structured payloads as text.
std::string join_fields(std::span<const std::string> fields, char sep = '\n');
std::vector<std::string> split_fields(std::string_view text, char sep = '\n');

}  // namespace cohort::ps
