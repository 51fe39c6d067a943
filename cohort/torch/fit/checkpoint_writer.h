// How the fit callbacks that write checkpoints (ModelCheckpoint,
// BackupAndRestore) write one: every process serialises what it holds (a
// sharded strategy's save is collective), the chief writes the file
// atomically, keeping the previous one.
#pragma once

#include <functional>
#include <string>

#include <torch/serialize/archive.h>

namespace cohort {

class Model;

void write_chief_checkpoint(Model& model, const std::string& path,
                            const std::function<void(torch::serialize::OutputArchive&)>& fill);

}  // namespace cohort
