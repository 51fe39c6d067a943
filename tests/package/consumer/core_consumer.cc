// Every rank contributes rank + 1; prints the sum the world agreed on.
#include <cstdio>

#include "cohort/comm/create.h"

int main() {
  auto world = cohort::comm::init_world();
  double value = world.comm->rank() + 1;
  world.comm->allreduce(cohort::BufferView{&value, 1, cohort::DType::f64});
  std::printf("core rank %d of %d: sum %g\n", world.comm->rank(), world.comm->size(), value);
}
