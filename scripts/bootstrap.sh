#!/usr/bin/env bash
# Installs every Debian package cohort needs to build, test and benchmark.
#
# Usage: scripts/bootstrap.sh [--with-torch] [--with-python] [--with-slurm] [--with-browser] [--with-fuzz] [--with-format] [--check]
#   --with-torch  also install python3-torch (PyTorch for Python, for
#                 comparisons; the DataLoader peer of bench/input_pipeline.sh
#                 parses tf.train.Example with python3-protobuf, a core package);
#                 LibTorch itself is in the default set.
#   --with-python also install what the Python package cohort (python/)
#                 builds and tests with: python3-torch, python3-dev,
#                 pybind11-dev, and venv, pip, setuptools and wheel for
#                 `pip install .` (`make test` asks for them unless
#                 WITH_PYTHON=0).
#   --with-slurm  also install Slurm and munge (tests/slurm starts a
#                 one-machine cluster; `make test` asks for them).
#   --with-browser also install Chromium (tests/dashboard opens the live
#                 dashboard in a headless browser; `make test` asks for it).
#   --with-fuzz   also install clang and its libFuzzer and sanitizer runtimes
#                 (`make fuzz`, fuzz/README.md).
#   --with-format also install clang-format (scripts/check_format.sh, which
#                 .ci/run runs).
#   --check       install nothing; exit 0 when everything is present, 1 otherwise
#                 (the Makefile uses it to skip bootstrap quickly).
#
# Idempotent: packages already installed are left alone, and `apt-get update`
# runs once, only when something is missing. Works as root, or through sudo
# otherwise. Nothing is downloaded from outside the Debian archive.
set -euo pipefail

# The core: compiler, build system, test and benchmark libraries, OpenSSL
# (store authentication), OpenMPI (the mpi communicator, and the peer in
# bench/allreduce_vs_mpi.sh), Gloo (the gloo communicator; it pulls in
# libibverbs-dev and libhiredis-dev, which Debian's Gloo links),
# iproute2 (network-namespace tests), nftables (firewall faults that
# cohortrun --check must find, in those namespaces), cairo (cohort/plot: PNG charts),
# python3 (scripts), OpenBLAS (the threaded BLAS LibTorch picks up at run
# time); then LibTorch and
# Fashion-MNIST for cohort/torch and `make demo`, which trains on it, and
# fortunes, whose plain-text quotations are the corpus of examples/char_lm;
# protobuf (library and protoc) for cohort/data's tf.train.Example records;
# cpp-httplib and Chart.js for cohort/dashboard (the live dashboard's server
# and charts, embedded at build time: no CDN), python3-jsonschema, which
# checks /api/status against its schema in tests/dashboard, and
# python3-protobuf, the peer that reads cohort's TensorBoard event files in
# tests/tensorboard.
core_packages=(
  build-essential
  g++
  cmake
  ninja-build
  pkg-config
  libgtest-dev
  googletest
  libbenchmark-dev
  libssl-dev
  zlib1g-dev
  libopenmpi-dev
  openmpi-bin
  libgloo-dev
  libprotobuf-dev
  protobuf-compiler
  libfftw3-dev
  libzmq3-dev cppzmq-dev  # ZeroMQ: the parameter servers' transport
  iproute2
  nftables  # tests/cluster's cohortrun --check cases firewall a port inside a host's namespace
  libcairo2-dev
  python3
  libopenblas0-pthread
  libtorch-dev
  dataset-fashion-mnist
  fortunes
  libcpp-httplib-dev
  libjs-chart.js
  python3-jsonschema
  python3-protobuf
)

# Optional: Chromium, headless, for tests/dashboard's browser test.
browser_packages=(
  chromium
)

# Optional: PyTorch for Python (large; not needed to build, test or demo).
torch_packages=(
  python3-torch
)

# Optional: the Python package's build and tests (python/, tests/python).
python_packages=(
  python3-torch
  python3-dev
  pybind11-dev
  python3-venv
  python3-pip
  python3-setuptools
  python3-wheel
)

# Optional: Slurm's daemons and commands, and munge, its authentication,
# for tests/slurm (3.5 MB; the services are not started or enabled).
slurm_packages=(
  slurm-wlm
  munge
)

# Optional: clang with libFuzzer for the fuzzing harnesses (make fuzz).
fuzz_packages=(
  clang
  libclang-rt-14-dev
)

# Optional: clang-format 14 and git clang-format, for the format check.
format_packages=(
  clang-format
)

with_torch=0
with_python=0
with_slurm=0
with_browser=0
with_fuzz=0
with_format=0
check_only=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --with-python) with_python=1 ;;
    --with-slurm) with_slurm=1 ;;
    --with-browser) with_browser=1 ;;
    --with-fuzz) with_fuzz=1 ;;
    --with-format) with_format=1 ;;
    --check) check_only=1 ;;
    -h|--help)
      sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "bootstrap.sh: unknown argument '$arg' (expected --with-torch, --with-python, --with-slurm, --with-browser, --with-fuzz, --with-format, --check, --help)" >&2
      exit 2
      ;;
  esac
done

wanted=("${core_packages[@]}")
if [[ $with_torch == 1 ]]; then
  wanted+=("${torch_packages[@]}")
fi
if [[ $with_python == 1 ]]; then
  wanted+=("${python_packages[@]}")
fi
if [[ $with_slurm == 1 ]]; then
  wanted+=("${slurm_packages[@]}")
fi
if [[ $with_browser == 1 ]]; then
  wanted+=("${browser_packages[@]}")
fi
if [[ $with_fuzz == 1 ]]; then
  wanted+=("${fuzz_packages[@]}")
fi
if [[ $with_format == 1 ]]; then
  wanted+=("${format_packages[@]}")
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "bootstrap.sh: dpkg-query not found; this script supports Debian and its derivatives only" >&2
  exit 1
fi

# One dpkg-query for all packages keeps the no-op path fast (tens of ms).
missing=()
while IFS=$'\t' read -r name status; do
  if [[ $status != "install ok installed" ]]; then
    missing+=("$name")
  fi
done < <(
  for pkg in "${wanted[@]}"; do
    # A package dpkg has never heard of prints nothing on stdout; report it
    # as missing explicitly.
    line=$(dpkg-query -W -f='${Package}\t${Status}\n' "$pkg" 2>/dev/null | head -n1 || true)
    if [[ -z $line ]]; then
      printf '%s\tnot-installed\n' "$pkg"
    else
      printf '%s\n' "$line"
    fi
  done
)

if [[ ${#missing[@]} -eq 0 ]]; then
  [[ $check_only == 1 ]] || echo "bootstrap.sh: all ${#wanted[@]} packages present"
  exit 0
fi
if [[ $check_only == 1 ]]; then
  echo "bootstrap.sh: missing: ${missing[*]}"
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "bootstrap.sh: need root to install ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi

echo "bootstrap.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
# Two thirds of a fresh machine's install time is not unpacking: dpkg's
# fsync of every file, and man-db re-indexing every manual page after each
# batch. --force-unsafe-io skips the fsyncs (a crash mid-install means
# running this again, as on any interrupted install); man-db's trigger runs
# only while /var/lib/man-db/auto-update exists, so it is set aside for the
# install and put back after (`mandb` refreshes the index if wanted); on a
# machine without man-db yet (a minimal image) it is installed with
# auto-update off, as container images ship it.
# Measured on a fresh Debian 12 (debootstrap, 438 packages, the two
# settings applied by hand): 4 min 31 s without them, 3 min 10 s with them.
man_flag=/var/lib/man-db/auto-update
if ! dpkg-query -W -f='${Status}' man-db 2>/dev/null | grep -q "install ok installed"; then
  echo "man-db man-db/auto-update boolean false" | "${as_root[@]}" debconf-set-selections
elif [[ -e $man_flag ]]; then
  "${as_root[@]}" mv "$man_flag" "$man_flag.cohort-bootstrap"
  trap '"${as_root[@]}" mv "$man_flag.cohort-bootstrap" "$man_flag"' EXIT
fi
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}"
echo "bootstrap.sh: done"
