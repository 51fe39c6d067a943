// torch.distributed's env:// rendezvous for the ranks of a cohortrun job:
// MASTER_ADDR and MASTER_PORT, as torchrun sets them.
//
// PyTorch's init_process_group() without an init_method reads them: rank 0
// serves a c10d TCPStore on MASTER_PORT of its host and every rank connects
// to MASTER_ADDR:MASTER_PORT. cohortrun's own store speaks cohort's protocol,
// not c10d's, so the master is never the store: it is a port free on rank
// 0's host, at the address a communicator of rank 0 would listen on
// (net::listen_choice: COHORT_IFACE's, loopback when every rank is on that
// host, else the route toward the job's store, which every rank reaches).
// As with torchrun's agent, the port is probed and released; rank 0's
// TCPStore binds it moments later.
//
// Who chooses it:
//  - rank 0 on the launcher's machine: the launcher, before any rank starts
//    (JobEnvironment::torch_master, in every rank's environment);
//  - rank 0 on another host: rank 0's remote end (remote_rank.h), which
//    publishes it in the job's store under kTorchMasterKey before it starts
//    the program; the other ranks' remote ends, and the launcher for the
//    ranks on its own machine, read it there before starting theirs.
// A MASTER_ADDR or MASTER_PORT the user gave with --env is kept as given,
// and no master is chosen. Exported to cohortrun they are not the user's
// choice but inherited (from the job cohortrun runs in, or a shell that ran
// one), as torchrun too sets its own whatever it inherits.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/launcher/rank_environment.h"
#include "cohort/rendezvous/store.h"

namespace cohort::launcher {

// Where rank 0's remote end publishes the master ("addr:port").
inline constexpr const char* kTorchMasterKey = "cohortrun/torch_master";

// How a remote rank's end learns the master (RemotePayload::torch_master).
enum class TorchMasterRole {
  given,    // in the payload's variables already (or the user's)
  publish,  // rank 0: choose it on this host and publish it
  read,     // another rank: read what rank 0's end published
};
const char* torch_master_role_name(TorchMasterRole role);  // "given", "publish", "read"
std::optional<TorchMasterRole> torch_master_role(std::string_view name);

// Whether the user set MASTER_ADDR or MASTER_PORT among --env's `extra`.
bool user_sets_torch_master(const std::vector<std::pair<std::string, std::string>>& extra);

// Chooses the master on this host, for a rank 0 running here: "addr:port",
// the address as described above (`iface`: COHORT_IFACE or empty, passed
// over when it has no IPv4 address; `all_local`: every rank of the job is
// on this host; `store_host`: the job's store) and a TCP port free on every
// address of this host now. Throws ConfigError only when no port can be had.
std::string choose_torch_master(const std::string& iface, bool all_local, const std::string& store_host);

// What rank 0's remote end published in the job's `store`, waiting up to
// `timeout_s`. `rank0_running`, when given, is asked between short polls:
// once it says false (rank 0's start ended before publishing, and nothing
// ever will) the wait ends early. Throws TimeoutError or Error saying so.
std::string await_torch_master(rendezvous::Store& store, double timeout_s,
                               const std::function<bool()>& rank0_running = {});

// Sets MASTER_ADDR and MASTER_PORT in `env` from "addr:port" (an IPv6
// address without brackets, as c10d takes it).
void set_torch_master(EnvironmentMap& env, const std::string& master);

}  // namespace cohort::launcher
