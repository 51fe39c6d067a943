# Horovod's PyTorch API (import cohort.torch as hvd), under cohortrun.
# Included by tests/python/CMakeLists.txt after cohort_python_test() and
# COHORT_PYTHON are defined.
set(hvd_dir ${CMAKE_CURRENT_SOURCE_DIR})
set(hvd_run $<TARGET_FILE:cohortrun>)

# test_torch.py's cases with closed-form values (~5 s at 2 ranks, ~8 s at 3);
# init() after shutdown() is its own test.
foreach(np 2 3)
  cohort_python_test(python.horovod.api_np${np}
    ${hvd_run} -np ${np} ${COHORT_PYTHON} ${hvd_dir}/hvd_api_test.py --skip shutdown_and_init_again)
endforeach()
cohort_python_test(python.horovod.reinit
  ${hvd_run} -np 2 ${COHORT_PYTHON} ${hvd_dir}/hvd_api_test.py --only shutdown_and_init_again)

# Horovod's MNIST example on Fashion-MNIST: >= 80% test accuracy (42-65 s
# beside other tests). COST: ctest starts it among the first
# when it has no timings of its own (a fresh clone, CI), rather than last,
# where it was the run's tail.
cohort_python_test(python.horovod.mnist_np2
  ${hvd_run} -np 2 ${COHORT_PYTHON} ${hvd_dir}/hvd_mnist.py --min-accuracy 0.8)
set_tests_properties(python.horovod.mnist_np2 PROPERTIES COST 60)

# hvd.elastic: three ranks killed one after another (before a step's
# allreduce, after its optimizer step, and the first rank), replaced; the
# parameters equal a one-process replay (~10 s).
cohort_python_test(python.horovod.elastic
  ${hvd_run} -np 3 --min-np 2 --max-restarts 1 ${COHORT_PYTHON} ${hvd_dir}/hvd_elastic.py
  --np 3 --kill 0:4:before --kill 1:10:after --kill 2:17:before)
