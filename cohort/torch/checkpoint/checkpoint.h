// Checkpoints: a training run's model, optimizer and position in one file,
// written so that a crash or a full disk never costs the last good one.
//
// File format (version 1, little-endian):
//   0  "COHORTCK"   magic
//   8  u32 version  (1)
//  12  u32 flags    (0)
//  16  u64 payload bytes
//  24  u32 CRC-32 (zlib) of the payload
//  28  u32 CRC-32 of bytes 0..27
//  32  payload: a LibTorch archive with "model", "optimizer" and "training_state"
//
// Saving writes "<path>.tmp.<pid>.<n>", fsyncs it, keeps the current "<path>" as
// "<path>.prev" (hard link, then rename: "<path>" exists at every instant),
// renames the new file over "<path>" and fsyncs the directory. Loading
// verifies size, magic, version and both checksums before touching the
// model, and throws ConfigError saying what is wrong (not a checkpoint,
// truncated, corrupt, does not fit the model) and naming the previous
// checkpoint to fall back to.
//
// In a distributed run, rank 0 saves (the ranks are identical) and
// resume_from_checkpoint() restores every rank from root's file.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/engine/engine.h"
#include "cohort/torch/core/training_state.h"  // TrainingState

namespace cohort {

struct CheckpointOptions {
  bool keep_previous = true;  // keep the replaced checkpoint as "<path>.prev"
};

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingState& state,
                     const CheckpointOptions& options = {});

// Restores the module's parameters and buffers and the optimizer's state in
// place; returns the saved TrainingState. ConfigError on any problem (see
// the file comment); the module and optimizer are untouched unless the file
// verified.
TrainingState load_checkpoint(const std::string& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer);

// Throws the ConfigError load_checkpoint() would for a damaged file; reads
// the file but loads nothing.
void verify_checkpoint(const std::string& path);

std::string previous_checkpoint_path(const std::string& path);

// The file layer under the functions above, for checkpoints of other
// content (fit()'s BackupAndRestore, a strategy's sharded state): writes
// `payload` framed and checksummed as the file comment says, atomically,
// keeping the previous file; reads it back verified (ConfigError naming what
// is wrong otherwise).
void write_checkpoint_file(const std::string& path, const std::vector<char>& payload,
                           const CheckpointOptions& options = {});
std::vector<char> read_checkpoint_file(const std::string& path);

// Writes the "training_state" record that load_checkpoint() reads, for
// writers that put "model" and "optimizer" in an archive themselves.
void save_training_state(torch::serialize::OutputArchive& archive, const TrainingState& state);

// A LibTorch archive as bytes (read back with InputArchive::load_from).
std::vector<char> archive_bytes(torch::serialize::OutputArchive& archive);

struct ResumeOptions {
  int root = 0;                        // the rank that reads the file
  bool fall_back_to_previous = true;   // a damaged "<path>" falls back to "<path>.prev" (with a warning)
  engine::Engine* engine = nullptr;
};

// Collective. Root loads `path` (or its previous checkpoint, see options) and
// every rank receives root's model, optimizer state and TrainingState.
// nullopt on every rank when neither file exists (a fresh start). When root
// cannot load, every rank throws ConfigError with root's reason.
std::optional<TrainingState> resume_from_checkpoint(const std::string& path, torch::nn::Module& module,
                                                    torch::optim::Optimizer& optimizer,
                                                    const ResumeOptions& options = {});

}  // namespace cohort
