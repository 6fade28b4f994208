#!/bin/sh
# do.sh: the one entry point on a fresh Debian 12 machine (run as root).
#
#   ./do.sh run    install what is missing, build, run the main program
#   ./do.sh test   install what is missing, build, run every test (the
#                  normal build, then again under AddressSanitizer + UBSan,
#                  built without MPI)
#   ./do.sh build  install what is missing and build only
#   ./do.sh reference  create or update the reference environment: a Python
#                  virtual environment outside the tree with PyTorch 2.x,
#                  transformers, tokenizers, onnxruntime, gguf, ... from the
#                  lock tools/reference/requirements.txt (docs/testing.md);
#                  ./do.sh test sets it up first and runs the tests that
#                  judge libtensor against it
#   ./do.sh fuzz [seconds]  install clang if missing, build the fuzz harnesses
#                  with libFuzzer + ASan + UBSan, run each for the given seconds
#                  (default 60), one after the other; new crashes go to
#                  fuzz/findings/<harness>/ (fuzz/README.md)
#
# Builds go to build/ (Release), build-asan/ (sanitizers), build-fuzz/ (clang).
set -eu
cd "$(dirname "$0")"

# Debian packages, one group per line (add a new dependency on a line of its
# own, and to the README's list, in the commit that starts using it).
PACKAGES="cmake make gcc pkg-config"
PACKAGES="$PACKAGES libblis-openmp-dev"             # f32/f64 products
PACKAGES="$PACKAGES libdnnl-dev"                    # bf16 products, f32 convolutions (oneDNN)
PACKAGES="$PACKAGES libhdf5-dev zlib1g-dev hdf5-tools" # checkpoints
PACKAGES="$PACKAGES libjansson-dev"                 # JSON (safetensors headers, tokenizer.json)
PACKAGES="$PACKAGES libutf8proc-dev"                # Unicode for Hugging Face tokenizers (normalization, case, categories)
PACKAGES="$PACKAGES libpcre2-dev"                   # regexes of Hugging Face tokenizers (PCRE2 with JIT)
PACKAGES="$PACKAGES libprotobuf-c-dev protobuf-c-compiler" # ONNX export (protobuf-c; protoc-c compiles onnx.proto)
PACKAGES="$PACKAGES check"                          # tests
PACKAGES="$PACKAGES dataset-fashion-mnist"          # the Fashion-MNIST example
PACKAGES="$PACKAGES python3-numpy python3-h5py python3-torch" # the Python package (python/) and its tests
PACKAGES="$PACKAGES libopenmpi-dev openmpi-bin"     # data parallelism over MPI (dist/, mpirun)
# Only ./do.sh fuzz needs these (clang, its libFuzzer runtime, and its OpenMP).
FUZZ_PACKAGES="clang libclang-rt-14-dev libomp-14-dev"
# The reference environment (./do.sh reference, ./do.sh test): the venv module,
# and Python's headers and g++ for torch.compile's C++ kernels.
REFERENCE_PACKAGES="python3-venv python3-dev g++"
# Where it lives: outside the source tree, shared by every clone on the machine.
REFERENCE_DIR="${LT_REFERENCE_DIR:-${HOME:-/root}/.cache/libtensor/reference}"
# llama.cpp as llama-cpp-python builds it for the reference (CPU backend only:
# no CUDA, Metal, Vulkan or BLAS; the CPU's own instructions).
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
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

# reference: the venv at $REFERENCE_DIR holding exactly the lock. Fast when it
# is there (the lock is compared with the copy saved at the last install); a
# partial install is completed by the next call (pip install is idempotent;
# the copy is written last). Without network it fails within seconds.
reference() {
  lock=tools/reference/requirements.txt
  py="$REFERENCE_DIR/bin/python"
  if [ -x "$py" ] && cmp -s "$lock" "$REFERENCE_DIR/libtensor-lock.txt" && "$py" -c 'import sys' 2>/dev/null; then
    echo "do.sh reference: up to date ($REFERENCE_DIR)"
    return 0
  fi
  [ -x "$py" ] || /usr/bin/python3 -m venv "$REFERENCE_DIR"
  probe=$(mktemp -d)
  if ! "$py" -m pip download -q --no-cache-dir --no-deps --retries 0 --timeout 15 -d "$probe" six==1.16.0 >"$probe/log" 2>&1; then
    echo "do.sh reference: the Python Package Index cannot be reached (pip download of a small package failed:" \
      "$(tail -1 "$probe/log")); the reference environment needs it (docs/testing.md)" >&2
    rm -rf "$probe"
    exit 1
  fi
  rm -rf "$probe"
  echo "do.sh reference: installing the lock $lock into $REFERENCE_DIR (about 6 GB, 2 minutes on a fresh machine)"
  # llama-cpp-python (the judge of the GGUF files) builds llama.cpp from source:
  # its wheel is built once into $REFERENCE_DIR/wheels, CPU backend only, on
  # every core, and every later install takes it from there (docs/testing.md).
  wheels="$REFERENCE_DIR/wheels"
  llama_pin=$(grep -i '^llama[-_]cpp[-_]python==' "$lock" || true)
  if [ -n "$llama_pin" ] && ! ls "$wheels"/llama_cpp_python-"${llama_pin#*==}"-*.whl >/dev/null 2>&1; then
    echo "do.sh reference: building $llama_pin (llama.cpp from source, CPU only: about 10 minutes of CPU time)"
    mkdir -p "$wheels"
    CMAKE_BUILD_PARALLEL_LEVEL=$JOBS CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
      "$py" -m pip wheel -q --no-deps --retries 2 -w "$wheels" "$llama_pin"
  fi
  "$py" -m pip install -q --retries 2 --find-links "$wheels" -r "$lock"
  cp "$lock" "$REFERENCE_DIR/libtensor-lock.txt"
  echo "do.sh reference: ready: $py"
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
    PACKAGES="$PACKAGES $REFERENCE_PACKAGES"
    setup
    reference
    build build -DCMAKE_BUILD_TYPE=Release -DLT_REFERENCE_PYTHON="$REFERENCE_DIR/bin/python"
    ctest --test-dir build --output-on-failure -j "$JOBS"
    # The sanitizer build is also the build without MPI (-DLT_MPI=OFF: dist/
    # as a world of one): the mpirun tests run in the Release build only, so
    # nothing is lost, and every other test passes without MPI at no extra
    # cost (a third, MPI-less build would add minutes; docs/testing.md).
    build build-asan -DCMAKE_BUILD_TYPE=Debug -DLT_SANITIZE=ON -DLT_BUILD_BENCH=OFF -DLT_MPI=OFF
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$JOBS"
    echo "do.sh: all tests passed (Release, and ASan+UBSan without MPI)"
    ;;
  build)
    setup
    build build -DCMAKE_BUILD_TYPE=Release
    ;;
  reference)
    PACKAGES="$PACKAGES $REFERENCE_PACKAGES"
    setup
    reference
    ;;
  fuzz)
    seconds="${2:-60}"
    PACKAGES="$PACKAGES $FUZZ_PACKAGES"
    setup
    build build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_FUZZ=ON \
      -DLT_BUILD_TESTS=OFF -DLT_BUILD_BENCH=OFF
    # One harness at a time, one process each (-jobs is not used): the machine
    # may be shared. New interesting inputs go to build-fuzz/corpus/<name>
    # (not committed); crashes, timeouts and OOMs to fuzz/findings/<name>/.
    failed=""
    for exe in build-fuzz/fuzz/fuzz_*; do
      [ -x "$exe" ] || continue
      name=${exe##*/fuzz_}
      mkdir -p "build-fuzz/corpus/$name" "fuzz/findings/$name"
      log="build-fuzz/fuzz-$name.log"
      echo "do.sh fuzz: $name for ${seconds}s"
      # Fast allocation stacks (full ones made fuzz_checkpoint 4-5 times slower):
      # they stop at libhdf5's first frame, so fuzz/lsan_fast.supp suppresses
      # leaks allocated inside libhdf5 by module; the replay tests keep full
      # stacks and fuzz/lsan.supp's exact suppression (fuzz/README.md).
      if LT_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE ASAN_OPTIONS=fast_unwind_on_malloc=1 \
           LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan_fast.supp:print_suppressions=0" \
           "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
           -print_final_stats=1 -artifact_prefix="fuzz/findings/$name/" \
           "build-fuzz/corpus/$name" "fuzz/corpus/$name" >"$log" 2>&1; then
        status=ok
      else
        status="FOUND A CRASH (see $log and fuzz/findings/$name/)"
        failed="$failed $name"
      fi
      execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
      speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
      cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
      echo "do.sh fuzz: $name: ${execs:-?} executions (${speed:-?}/s), $cov: $status"
    done
    if [ -n "$failed" ]; then
      echo "do.sh fuzz: crashes in:$failed (inputs in fuzz/findings/; the replay tests now run them)" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: ./do.sh run | test | build | reference | fuzz [seconds]" >&2
    exit 2
    ;;
esac
