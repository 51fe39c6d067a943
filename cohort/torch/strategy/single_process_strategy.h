// SingleProcessStrategy: what every strategy that trains in one process
// shares (one_device, mirrored, central_storage): it is process 0 of 1, so
// a sum or a gather across processes is the value itself.
#pragma once

#include "cohort/torch/core/strategy.h"

namespace cohort {

class SingleProcessStrategy : public Strategy {
 public:
  int process_count() const override { return 1; }
  int process_index() const override { return 0; }
  at::Tensor all_sum(const at::Tensor& values) override { return values; }
  at::Tensor all_gather(const at::Tensor& rows) override { return rows; }
};

}  // namespace cohort
