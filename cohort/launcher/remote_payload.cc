#include "cohort/launcher/remote_payload.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "cohort/common/check.h"

namespace cohort::launcher {
namespace {

constexpr std::string_view kMagic = "cohortrun-remote 1\n";

void record(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ' ';
  out += std::to_string(value.size());
  out += '\n';
  out += value;
  out += '\n';
}

std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// Incremental parser: feed() bytes until it reports the end.
class Parser {
 public:
  // Bytes still needed before more can be parsed (at least 1), or 0 once
  // the payload is complete. Reading exactly that many never reads past it.
  size_t wanted() const { return done_ ? 0 : want_; }

  void feed(std::string_view bytes) {
    buffer_.append(bytes);
    COHORT_CHECK(buffer_.size() <= kMaxPayloadBytes) << "remote payload larger than " << kMaxPayloadBytes << " bytes";
    parse();
  }

  const RemotePayload& payload() const { return payload_; }
  bool done() const { return done_; }

 private:
  void parse() {
    if (!magic_seen_) {
      if (buffer_.size() < kMagic.size()) {
        want_ = kMagic.size() - buffer_.size();
        COHORT_CHECK(kMagic.starts_with(buffer_)) << "not a cohortrun payload";
        return;
      }
      COHORT_CHECK(std::string_view(buffer_).substr(0, kMagic.size()) == kMagic)
          << "not a cohortrun payload (another cohortrun version?)";
      pos_ = kMagic.size();
      magic_seen_ = true;
    }
    for (;;) {
      const size_t newline = buffer_.find('\n', pos_);
      if (newline == std::string::npos) {
        want_ = 1;
        return;
      }
      const std::string_view header = std::string_view(buffer_).substr(pos_, newline - pos_);
      if (header == "end") {
        COHORT_CHECK(newline + 1 == buffer_.size()) << "bytes after the end of the payload";
        finish();
        return;
      }
      const size_t space = header.find(' ');
      COHORT_CHECK(space != std::string_view::npos) << "malformed payload record '" << header << "'";
      size_t length = 0;
      const std::string_view digits = header.substr(space + 1);
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
      COHORT_CHECK(ec == std::errc() && ptr == digits.data() + digits.size() && !digits.empty())
          << "malformed payload record length '" << header << "'";
      COHORT_CHECK(length <= kMaxPayloadBytes) << "payload record too long";
      const size_t needed = newline + 1 + length + 1;
      if (buffer_.size() < needed) {
        want_ = needed - buffer_.size();
        return;
      }
      COHORT_CHECK(buffer_[needed - 1] == '\n') << "payload record '" << header << "' is not terminated";
      apply(header.substr(0, space), std::string_view(buffer_).substr(newline + 1, length));
      pos_ = needed;
    }
  }

  int integer(std::string_view name, std::string_view value) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    COHORT_CHECK(ec == std::errc() && ptr == value.data() + value.size() && v >= 0)
        << "payload " << name << " is not a count: '" << value << "'";
    return v;
  }

  double seconds(std::string_view name, std::string_view value) {
    const std::string text(value);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    COHORT_CHECK(!text.empty() && *end == '\0' && std::isfinite(v) && v >= 0)
        << "payload " << name << " is not a duration: '" << value << "'";
    return v;
  }

  void apply(std::string_view name, std::string_view value) {
    if (name == "rank") {
      payload_.rank = integer(name, value);
    } else if (name == "local_size") {
      payload_.local_size = integer(name, value);
    } else if (name == "host") {
      payload_.host = value;
    } else if (name == "grace_s") {
      payload_.grace_s = seconds(name, value);
    } else if (name == "start_timeout_s") {
      payload_.start_timeout_s = seconds(name, value);
    } else if (name == "cwd") {
      payload_.cwd = value;
    } else if (name == "output") {
      COHORT_CHECK(value == output_mode_name(OutputMode::pty) || value == output_mode_name(OutputMode::pipe))
          << "payload output is not pty or pipe: '" << value << "'";
      payload_.output = value == output_mode_name(OutputMode::pty) ? OutputMode::pty : OutputMode::pipe;
    } else if (name == "torch_master") {
      const auto role = torch_master_role(value);
      COHORT_CHECK(role.has_value()) << "payload torch_master is not given, publish or read: '" << value << "'";
      payload_.torch_master = *role;
    } else if (name == "arg") {
      payload_.argv.emplace_back(value);
    } else if (name == "env") {
      const size_t eq = value.find('=');
      COHORT_CHECK(eq != std::string_view::npos && eq > 0) << "payload variable without a name";
      payload_.env.emplace_back(std::string(value.substr(0, eq)), std::string(value.substr(eq + 1)));
    } else {
      COHORT_THROW(Error) << "unknown payload record '" << name << "'";
    }
  }

  void finish() {
    COHORT_CHECK(!payload_.argv.empty()) << "payload without a program";
    done_ = true;
  }

  std::string buffer_;
  size_t pos_ = 0;
  size_t want_ = kMagic.size();
  bool magic_seen_ = false;
  bool done_ = false;
  RemotePayload payload_;
};

}  // namespace

std::string encode_payload(const RemotePayload& p) {
  std::string out(kMagic);
  record(out, "rank", std::to_string(p.rank));
  record(out, "local_size", std::to_string(p.local_size));
  record(out, "host", p.host);
  record(out, "grace_s", number(p.grace_s));
  record(out, "start_timeout_s", number(p.start_timeout_s));
  record(out, "cwd", p.cwd);
  record(out, "output", output_mode_name(p.output));
  record(out, "torch_master", torch_master_role_name(p.torch_master));
  for (const std::string& a : p.argv) record(out, "arg", a);
  for (const auto& [k, v] : p.env) record(out, "env", k + "=" + v);
  out += "end\n";
  return out;
}

RemotePayload decode_payload(std::string_view bytes) {
  Parser parser;
  parser.feed(bytes);
  COHORT_CHECK(parser.done()) << "the payload ends early";
  return parser.payload();
}

RemotePayload read_payload(int fd) {
  Parser parser;
  std::string chunk;
  while (const size_t want = parser.wanted()) {
    chunk.resize(want);
    const ssize_t n = ::read(fd, chunk.data(), want);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK(n >= 0) << "reading the payload: " << std::strerror(errno);
    COHORT_CHECK(n > 0) << "the payload ended early (the launcher went away?)";
    parser.feed(std::string_view(chunk.data(), static_cast<size_t>(n)));
  }
  return parser.payload();
}

void send_payload(int fd, const RemotePayload& payload) {
  const std::string bytes = encode_payload(payload);
  if (bytes.size() > 65536) ::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(bytes.size()));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    COHORT_CHECK(n > 0) << "cannot pass rank " << payload.rank << "'s environment (" << bytes.size()
                        << " bytes) to its launch command: "
                        << (n < 0 && errno == EAGAIN ? "larger than a pipe holds" : std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace cohort::launcher
