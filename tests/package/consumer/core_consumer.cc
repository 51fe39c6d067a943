// Every rank contributes rank + 1; prints the sum the world agreed on. Uses
// only the one include and the core API (cohort::engine, no LibTorch).
#include <cohort/cohort.h>

#include <cstdio>

using namespace cohort;

int main() {
  auto world = comm::init_world();
  double value = world.comm->rank() + 1;
  world.comm->allreduce(BufferView{&value, 1, DType::f64});
  std::printf("core rank %d of %d: sum %g\n", world.comm->rank(), world.comm->size(), value);
}
