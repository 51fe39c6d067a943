# cohort: the two commands are `make demo` and `make test`. Each does the
# whole set-up on a fresh Debian machine (install packages, configure, build)
# and then its job; on a machine already set up they go straight to it.
#
#   make test    build, then run the test suite (ctest)
#   make demo    build, then train Fashion-MNIST on 2 ranks (cohortrun -np 2
#                build/examples/fashion_mnist): 2 epochs of the cnn, which must
#                reach 85% test accuracy; metrics and checkpoint in $(DEMO_DIR)
#   make bench   build, then bench/allreduce_vs_mpi.sh (cohort vs OpenMPI)
#   make build   set up and build everything (library, tools, examples, tests)
#   make clean   remove the build directory
#
# Variables: BUILD_DIR (build), BUILD_TYPE (RelWithDebInfo), JOBS (2, build
# parallelism), TEST_JOBS (2, tests at once: they spawn processes),
# CMAKE_FLAGS (extra -D options; given, they force a re-configure),
# CTEST_FLAGS (e.g. -R shm), DEMO_ARGS (fashion_mnist flags), DEMO_DIR
# (build/demo), BENCH_ARGS, BOOTSTRAP_FLAGS (--with-torch adds python3-torch).

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= 2
TEST_JOBS ?= 2
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
DEMO_DIR ?= $(BUILD_DIR)/demo
DEMO_ARGS ?= --epochs 2 --model cnn --target-accuracy 85
BENCH_ARGS ?=
BOOTSTRAP_FLAGS ?=

.PHONY: all bootstrap configure build test demo bench clean

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
	  --metrics $(DEMO_DIR)/metrics.jsonl --checkpoint $(DEMO_DIR)/checkpoint.bin

bench: build
	bash bench/allreduce_vs_mpi.sh --build-dir $(BUILD_DIR) $(BENCH_ARGS)

clean:
	rm -rf $(BUILD_DIR)
