#include "cohort/parameter_server/wire.h"

#include "cohort/common/check.h"

namespace cohort::ps {

const char* op_name(Op op) {
  switch (op) {
    case Op::hello: return "hello";
    case Op::join: return "join";
    case Op::declare: return "declare";
    case Op::push: return "push";
    case Op::push_rows: return "push_rows";
    case Op::pull: return "pull";
    case Op::pull_rows: return "pull_rows";
    case Op::push_pull: return "push_pull";
    case Op::commit: return "commit";
    case Op::ping: return "ping";
    case Op::bye: return "bye";
    case Op::save: return "save";
    case Op::load: return "load";
    case Op::replicate: return "replicate";
    case Op::promote: return "promote";
    case Op::stats: return "stats";
    case Op::shutdown: return "shutdown";
    case Op::keep_commit: return "keep_commit";
    case Op::restore_commit: return "restore_commit";
  }
  return "unknown";
}

Message Message::share() {
  Message copy;
  copy.header = header;
  copy.frames.reserve(frames.size());
  for (auto& f : frames) {
    copy.frames.emplace_back();
    copy.frames.back().copy(f);
  }
  return copy;
}

std::span<const int64_t> Message::row_ids(size_t i, std::vector<int64_t>& scratch) const {
  const zmq::message_t& frame = frames.at(i);
  COHORT_CHECK_AS(ConfigError, frame.size() % sizeof(int64_t) == 0)
      << "parameter server message: a row-id frame of " << frame.size() << " bytes is not a whole number of int64 ids";
  const size_t n = frame.size() / sizeof(int64_t);
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(int64_t) == 0)
    return {static_cast<const int64_t*>(frame.data()), n};
  scratch.resize(n);
  std::memcpy(scratch.data(), frame.data(), frame.size());
  return scratch;
}

void send_message(zmq::socket_t& socket, Message& message, std::string_view route) {
  const auto more = [&](bool last) { return last ? zmq::send_flags::dontwait : zmq::send_flags::sndmore | zmq::send_flags::dontwait; };
  if (!route.empty()) socket.send(zmq::buffer(route.data(), route.size()), more(false));
  socket.send(zmq::buffer(&message.header, sizeof(Header)), more(message.frames.empty()));
  for (size_t i = 0; i < message.frames.size(); ++i) socket.send(message.frames[i], more(i + 1 == message.frames.size()));
}

bool receive_message(zmq::socket_t& socket, Message& message, bool routed, std::string* route) {
  zmq::message_t part;
  if (!socket.recv(part, zmq::recv_flags::dontwait)) return false;
  message.frames.clear();
  bool has_more = part.more();
  if (routed) {
    if (route) *route = part.to_string();
    if (!has_more) {
      message.header.magic = 0;
      return true;
    }
    part.rebuild();
    (void)socket.recv(part, zmq::recv_flags::none);
    has_more = part.more();
  }
  if (part.size() == sizeof(Header)) {
    std::memcpy(&message.header, part.data(), sizeof(Header));
  } else {
    message.header = Header{};
    message.header.magic = 0;
  }
  while (has_more) {
    zmq::message_t frame;
    (void)socket.recv(frame, zmq::recv_flags::none);
    has_more = frame.more();
    message.frames.push_back(std::move(frame));
  }
  return true;
}

std::string join_fields(std::span<const std::string> fields, char sep) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += sep;
    out += fields[i];
  }
  return out;
}

std::vector<std::string> split_fields(std::string_view text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(sep, begin);
    out.emplace_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return out;
}

}  // namespace cohort::ps
