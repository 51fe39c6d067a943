# cohort: the two commands are `make demo` and `make test`. Each does the
# whole set-up on a fresh Debian machine (install packages, configure, build)
# and then its job; on a machine already set up they go straight to it.
#
#   make test    build, then run the test suite (ctest)
#   make demo    build, then train Fashion-MNIST on 2 ranks (cohortrun -np 2
#                build/examples/fashion_mnist): 2 epochs of the cnn, which must
#                reach 85% test accuracy; metrics, checkpoint and history
#                (CSV, PNG charts) in $(DEMO_DIR)
#   make bench   build, then bench/allreduce_vs_mpi.sh (cohort vs OpenMPI)
#   make build   set up and build everything (library, tools, examples, tests)
#                but the benchmarks, which the tests do not run
#   make bench-build   build the benchmarks of bench/ too (each bench/*.sh
#                also builds what it runs)
#   make fuzz    build the libFuzzer harnesses with clang in $(FUZZ_BUILD_DIR)
#                and run each for FUZZ_SECONDS (fuzz/README.md)
#   make clean   remove the build directory
#   make test-tsan   ThreadSanitizer over the engine, store, shm and launcher
#                tests, in its own build directory (build-tsan)
#   make test-asan   AddressSanitizer + UndefinedBehaviorSanitizer over the
#                whole suite, in its own build directory (build-asan)
# The sanitizer targets are not part of `make test`. They build torch-free
# (SANITIZER_CMAKE_FLAGS, default -DCOHORT_WITH_TORCH=OFF; give
# SANITIZER_CMAKE_FLAGS= to let CMake find LibTorch, and test-asan covers the
# torch tests too). Suppressions: tests/sanitizers/, third-party code only.
#
# Variables: BUILD_DIR (build), BUILD_TYPE (RelWithDebInfo), JOBS (2, build
# parallelism), TEST_JOBS (2, tests at once: they spawn processes),
# CMAKE_FLAGS (extra -D options; given, they force a re-configure),
# CTEST_FLAGS (e.g. -R shm), DEMO_ARGS (fashion_mnist flags), DEMO_DIR
# (build/demo), BENCH_ARGS, BOOTSTRAP_FLAGS (--with-torch adds python3-torch;
# `make test` adds --with-slurm: tests/slurm runs cohort under a real Slurm,
# and --with-browser: tests/dashboard opens the dashboard in Chromium),
# FUZZ_SECONDS (60, per harness), FUZZ_BUILD_DIR (build-fuzz), WITH_PYTHON
# (1: `make test` installs python3-torch, python3-dev and pybind11-dev through
# bootstrap --with-python, and builds and tests the Python package; 0: neither).

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= 2
TEST_JOBS ?= 2
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
DEMO_DIR ?= $(BUILD_DIR)/demo
DEMO_ARGS ?= --strategy multi_worker --epochs 2 --model cnn --target-accuracy 85
BENCH_ARGS ?=
BOOTSTRAP_FLAGS ?=
FUZZ_SECONDS ?= 60
FUZZ_BUILD_DIR ?= build-fuzz
WITH_PYTHON ?= 1

.PHONY: all bootstrap configure build bench-build test demo bench fuzz clean test-tsan test-asan

all: build

# bootstrap.sh --check is a single dpkg-query: the set-up costs nothing once
# done.
bootstrap:
	@bash scripts/bootstrap.sh --check $(BOOTSTRAP_FLAGS) >/dev/null 2>&1 || bash scripts/bootstrap.sh $(BOOTSTRAP_FLAGS)

# Configure once; afterwards ninja re-runs CMake itself when a CMakeLists.txt
# changes.
configure: bootstrap
	@if [ ! -f $(BUILD_DIR)/build.ninja ] || [ -n "$(CMAKE_FLAGS)" ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS); \
	fi

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

bench-build: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target benchmarks

# Prerequisites see this too: bootstrap installs Slurm for tests/slurm and
# Chromium for tests/dashboard's browser test.
# And the Python package's dependencies, whose tests then run too; WITH_PYTHON=0
# builds and tests without the package (the build without Python).
test: BOOTSTRAP_FLAGS += --with-slurm --with-browser $(if $(filter 1,$(WITH_PYTHON)),--with-python)
test: override CMAKE_FLAGS += $(if $(filter 1,$(WITH_PYTHON)),,-DCOHORT_WITH_PYTHON=OFF)
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(TEST_JOBS) $(CTEST_FLAGS)

# The demo builds only what it runs (the launcher, the libraries and the
# example), not the test suite. fashion_mnist prints the final accuracy and
# where the metrics and the checkpoint went; --target-accuracy makes the run
# fail below 85%.
demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target cohortrun fashion_mnist
	@mkdir -p $(DEMO_DIR)
	$(BUILD_DIR)/cohort/launcher/cohortrun -np 2 $(BUILD_DIR)/examples/fashion_mnist $(DEMO_ARGS) \
	  --metrics $(DEMO_DIR)/metrics.jsonl --checkpoint $(DEMO_DIR)/checkpoint.bin --csv $(DEMO_DIR)/history.csv \
	  --plot $(DEMO_DIR)/history

bench: build
	bash bench/allreduce_vs_mpi.sh --build-dir $(BUILD_DIR) $(BENCH_ARGS)

# Its own build directory: clang, libFuzzer, ASan and UBSan over the core
# (no tests, no LibTorch); only the fuzzers are built.
fuzz:
	@$(MAKE) --no-print-directory bootstrap BOOTSTRAP_FLAGS="$(BOOTSTRAP_FLAGS) --with-fuzz"
	@if [ ! -f $(FUZZ_BUILD_DIR)/build.ninja ]; then \
	  cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	    -DCMAKE_CXX_COMPILER=clang++ -DCOHORT_FUZZ=ON -DCOHORT_BUILD_TESTS=OFF -DCOHORT_WITH_TORCH=OFF \
	    -DCOHORT_WITH_GLOO=OFF -DCOHORT_WITH_MPI=OFF; \
	fi
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target cohort_fuzzers
	bash fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR)

# --- Sanitizers: a build directory each, configured once with the flags.
TSAN_DIR ?= build-tsan
ASAN_DIR ?= build-asan
SANITIZER_CMAKE_FLAGS ?= -DCOHORT_WITH_TORCH=OFF
TSAN_LABELS ?= ^(engine|rendezvous|shm|launcher)$$
# Left out of test-tsan: the 4 GiB allreduce needs more memory than TSan's
# shadow leaves on a 24 GiB machine (OOM-killed at 23.7 GB resident); it has
# no threads of its own to check, and test-asan and make test run it.
TSAN_EXCLUDE ?= ^ShmSegment\.AllreduceBeyondFourGigaElementsOfBytes$$
SUPPRESSIONS := $(CURDIR)/tests/sanitizers
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# $(call sanitized_build,DIR,FLAGS)
define sanitized_build
	@if [ ! -f $(1)/build.ninja ]; then \
	  cmake -S . -B $(1) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SANITIZER_CMAKE_FLAGS) \
	    "-DCMAKE_C_FLAGS=$(2)" "-DCMAKE_CXX_FLAGS=$(2)" \
	    "-DCMAKE_EXE_LINKER_FLAGS=$(2)" "-DCMAKE_SHARED_LINKER_FLAGS=$(2)"; \
	fi
	cmake --build $(1) -j $(JOBS)
endef

# A finding fails the test that made it (exit code 66 from TSan at exit; ASan
# and UBSan stop the process at the first one), in the test process and in the
# rank processes it starts, which inherit the options.
test-tsan: bootstrap
	$(call sanitized_build,$(TSAN_DIR),$(TSAN_FLAGS))
	cd $(TSAN_DIR) && TSAN_OPTIONS="second_deadlock_stack=1 suppressions=$(SUPPRESSIONS)/tsan.supp" \
	  ctest --output-on-failure -j $(TEST_JOBS) -L '$(TSAN_LABELS)' -E '$(TSAN_EXCLUDE)' $(CTEST_FLAGS)

test-asan: bootstrap
	$(call sanitized_build,$(ASAN_DIR),$(ASAN_FLAGS))
	cd $(ASAN_DIR) && ASAN_OPTIONS="detect_leaks=1 strict_string_checks=1 detect_stack_use_after_return=1 fast_unwind_on_malloc=0" \
	  LSAN_OPTIONS="suppressions=$(SUPPRESSIONS)/lsan.supp print_suppressions=0" \
	  UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1" \
	  ctest --output-on-failure -j $(TEST_JOBS) $(CTEST_FLAGS)
