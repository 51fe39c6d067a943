// SingleProcessStrategy: what every strategy that trains in one process
// shares (one_device, mirrored, central_storage): it is process 0 of 1, so
// a sum or a gather across processes is the value itself, and it refuses to
// start as one rank of several (each rank would train alone, silently).
#pragma once

#include <string>

#include "cohort/torch/core/strategy.h"

namespace cohort {

class SingleProcessStrategy : public Strategy {
 protected:
  // `name` in errors; ConfigError when the launcher's variables say this
  // process is one rank of several, unless `independent_ranks`.
  SingleProcessStrategy(const std::string& name, int replicas, bool independent_ranks = false);

  ReplicaPlacement do_placement() const override {
    return {.replicas_in_sync = replicas_, .local_replicas = replicas_, .process_count = 1, .process_index = 0};
  }
  at::Tensor do_all_sum(const at::Tensor& values) override { return values; }
  at::Tensor do_all_gather(const at::Tensor& rows) override { return rows; }

 private:
  int replicas_;
};

}  // namespace cohort
