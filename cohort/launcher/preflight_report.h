// What `cohortrun --check` found, and its judgement: the per-host table, the
// pairs of hosts, the collectives, the problems with what to do about each,
// and the verdict line. Pure: preflight.cc gathers a CheckRun from the
// probes (tools/probe) and prints judge()'s text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/common/json.h"

namespace cohort::launcher {

// One slot's probe as cohortrun saw it.
struct ProbeRank {
  int rank = 0;
  std::string host;                                      // as given in -H or the hostfile
  std::optional<json::Value> facts, links, collectives;  // what it set in the store (preflight_protocol.h)
  std::optional<std::string> done;                       // its end: "" when it went through, else what failed
  bool exited = false;
  int exit_code = 0;                // when exited (128 + signal when killed)
  bool timed_out = false;           // still running at the check's deadline (killed)
  std::string spawn_error;          // its launch command could not be started here
  std::vector<std::string> output;  // its last lines (launch command, remote end, probe)
};

struct CheckRun {
  int num_ranks = 0;
  std::vector<std::string> hosts;  // in placement order
  std::string store_host;          // this machine's name
  std::string store_address;       // advertised
  int store_port = 0;              // where it listened
  int store_port_wanted = 0;       // --port; 0: any
  std::string store_port_error;    // --port could not be bound (the check then used a free one)
  std::string backend = "auto";    // --backend
  std::string launch_template;
  std::string probe_path;
  std::string build_id, build_description, libtorch;  // cohortrun's own
  std::vector<ProbeRank> ranks;
  std::string go;                  // "1" when the collectives ran, else why not
  std::string topology;            // rank 0's fitted topology (JSON), empty when none
  std::optional<json::Value> fit;  // how well it fits (preflight_protocol.h, kFitKey)
  std::string topology_file;       // where it was written (--check-topology), empty when not
  std::string topology_error;      // why it could not be written
  double seconds = 0;
};

struct CheckVerdict {
  std::string text;  // the whole report, ending with the verdict line
  int problems = 0;
};

CheckVerdict judge(const CheckRun& run);

// Whether the collectives can run, from the facts and links gathered so
// far: "1", or the reason they are skipped. cohortrun sets it as the go key.
std::string collectives_go(const CheckRun& run);

// Interface names the check does not consider (loopback, container
// bridges and veth ends) when it lists a host's other interfaces and
// suggests one for --network-interface, unless they are a host's only ones.
// The launch does not skip them: its choice is net::listen_choice's.
bool excluded_interface(const std::string& name, std::string* why = nullptr);

}  // namespace cohort::launcher
