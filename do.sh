#!/bin/sh
# do.sh: the one entry point on a fresh Debian 12 machine (run as root).
#
#   ./do.sh run    install what is missing, build, run the main program
#   ./do.sh test   install what is missing, build, run every test (the
#                  normal build, then again under AddressSanitizer + UBSan)
#   ./do.sh build  install what is missing and build only
#
# Builds go to build/ (Release) and build-asan/ (sanitizers).
set -eu
cd "$(dirname "$0")"

PACKAGES="cmake make gcc pkg-config libblis-openmp-dev libhdf5-dev zlib1g-dev check hdf5-tools dataset-fashion-mnist"
JOBS=$(nproc 2>/dev/null || echo 2)

setup() {
  missing=""
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "do.sh: installing Debian packages:$missing"
    if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
  fi
}

build() { # build <dir> <cmake options...>
  dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

case "${1:-}" in
  run)
    setup
    build build -DCMAKE_BUILD_TYPE=Release
    # The main job: train the default Transformer (flags after "run" pass through).
    # Idle OpenMP threads sleep instead of spinning: the same speed on a quiet
    # machine, several times faster on a busy one (docs/benchmarks.md).
    shift
    export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
    exec build/models/transformer/train "$@"
    ;;
  test)
    setup
    build build -DCMAKE_BUILD_TYPE=Release
    ctest --test-dir build --output-on-failure -j "$JOBS"
    build build-asan -DCMAKE_BUILD_TYPE=Debug -DLT_SANITIZE=ON -DLT_BUILD_BENCH=OFF
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$JOBS"
    echo "do.sh: all tests passed (Release and ASan+UBSan builds)"
    ;;
  build)
    setup
    build build -DCMAKE_BUILD_TYPE=Release
    ;;
  *)
    echo "usage: ./do.sh run | test | build" >&2
    exit 2
    ;;
esac
