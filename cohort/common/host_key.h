// The host key: what tells ranks on the same machine apart from ranks on
// other machines, so that the hierarchical communicator can group them and
// a parameter server can offer its same-host clients an ipc:// socket.
// Internal (not installed), in common for both users.
//
// COHORT_HOST when set (cohortrun sets it to the host's name from -H or the
// hostfile); otherwise the host name, the kernel's boot id and the inode of
// this process's network namespace. The host name alone is not enough: the
// network namespaces of an emulated cluster (scripts/cluster.sh) share one
// host name, and containers may share names across machines; ranks on one
// kernel in one network namespace are on one host.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::net {

// "COHORT_HOST" or "hostname/boot_id/net:[inode]".
std::string host_key();

// The host's name for messages: COHORT_HOST when set (the name the user gave
// cohortrun in -H or the hostfile, so that errors name hosts as the user
// does), otherwise the machine's host name.
std::string host_label();

// A 64-bit FNV-1a hash of `key`, which ranks exchange instead of the text.
uint64_t host_key_hash(const std::string& key);

}  // namespace cohort::net
