// What cohortrun sends a remote rank on the launch command's standard input:
// everything the rank needs that must not appear on a command line (the job
// secret) or that a remote shell would mangle (arguments with blanks or
// quotes).
//
// Encoding: the line "cohortrun-remote 1", then records "NAME LENGTH\n"
// followed by LENGTH bytes and "\n", then the line "end". Any byte may
// appear in a value. A reader never needs more than kMaxPayloadBytes.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/launcher/spawn.h"
#include "cohort/launcher/torch_master.h"

namespace cohort::launcher {

inline constexpr size_t kMaxPayloadBytes = size_t(1) << 20;

struct RemotePayload {
  int rank = 0;
  int local_size = 1;  // ranks on the rank's host, for thread counts there
  std::string host;    // the host's name in the host list, for messages
  double grace_s = 3.0;          // SIGTERM to SIGKILL when the launcher goes away
  double start_timeout_s = 60;   // how long the store may take to answer
  std::string cwd;               // the launcher's working directory
  OutputMode output = OutputMode::pipe;  // the program's stdout: pty or pipe (cohortrun --output)
  // How the rank learns MASTER_ADDR/MASTER_PORT (torch_master.h).
  TorchMasterRole torch_master = TorchMasterRole::given;
  std::vector<std::string> argv;  // the program and its arguments
  // Variables set for the rank on top of the remote environment, in order.
  std::vector<std::pair<std::string, std::string>> env;
  bool operator==(const RemotePayload&) const = default;
};

std::string encode_payload(const RemotePayload& payload);

// Throws Error naming what is malformed.
RemotePayload decode_payload(std::string_view bytes);

// Writes a remote rank's payload into its launch command's stdin pipe. The
// pipe is grown to hold all of it, so this never blocks on a remote end that
// has not started reading yet (ssh still connecting). Error when it cannot.
void send_payload(int fd, const RemotePayload& payload);

// Reads one payload from `fd` (blocking), no byte past its end. Throws
// Error when the stream ends first or holds something else.
RemotePayload read_payload(int fd);

}  // namespace cohort::launcher
