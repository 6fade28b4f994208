# shellcheck shell=sh
# bench/torch_env.sh: how the benchmark scripts give PyTorch its best BLAS, in
# one place. Sourced (". "$here/torch_env.sh"") by bench/run_train_bench.sh,
# run_lstm_bench.sh, run_vision_bench.sh and run_vit_bench.sh (and, for
# bench_build and bench_header only, run_attention_bench.sh); POSIX sh.
#
# Why. Debian's python3-torch calls whatever libblas.so.3 the system's
# alternatives point to; on the project's machines that is BLIS, whose
# runtime picks its slow 'generic' kernels unless BLIS_ARCH_TYPE names a
# kernel set, and OPENBLAS_CORETYPE=Haswell in the environment halves
# OpenBLAS's speed. So each script measures torch with every BLAS it can be
# given and keeps the fastest:
#   - the system libblas.so.3 (BLIS: with BLIS_ARCH_TYPE set to the kernel set
#     libtensor chose, skx when the script does not know it);
#   - OpenBLAS from $TORCH_OPENBLAS_DIR or /usr/lib/x86_64-linux-gnu/openblas-pthread
#     (first on LD_LIBRARY_PATH), unless the system BLAS is OpenBLAS already;
# always with OPENBLAS_CORETYPE unset (TORCH_UNSET) and OMP_WAIT_POLICY=PASSIVE
# where torch runs more than one thread (idle OpenMP threads then sleep
# instead of spinning against the BLAS threads). How many threads each
# script probes is its own choice (its header comment says).
#
# PyTorch 2.x is the reference environment's (./do.sh reference,
# docs/testing.md): a pip wheel with MKL and oneDNN linked in, so none of the
# BLAS choices below apply to it; what is chosen for it is the set-up (eager,
# torch.compile, its mode) and the threads.
#
# Interface (each function prints its answer on stdout; nothing exits):
#   TORCH_PY                  the Python that has Debian's torch 1.13: /usr/bin/python3
#   TORCH2_PY                 the reference environment's Python (torch 2.x), or
#                             empty when ./do.sh reference has not made it
#                             ($LT_REFERENCE_DIR, else ~/.cache/libtensor/reference)
#   TORCH_UNSET               the "env" flags that clear what would slow torch
#                             or override its thread count:
#                             env $TORCH_UNSET VAR=... "$TORCH_PY" script.py
#   torch2_setups FILE [max-autotune]
#                             writes PyTorch 2.x's set-ups to try to FILE, one
#                             "name|twin flags" line each (bench/torch_setup.py
#                             reads the flags): eager, torch.compile in its
#                             default mode, and with "max-autotune" that mode
#                             too; always the fused optimizer
#   torch_sysblas             the BLAS library torch loads by default (a path
#                             from /proc/self/maps), or "unknown"
#   blis_arch_number ARCH     BLIS_ARCH_TYPE's number for a BLIS kernel set
#                             (skx 0, haswell 3, zen 4, zen2 5, zen3 6); empty
#                             if unknown
#   torch_blas_candidates FILE SYSBLAS [ARCH [FETCH_DIR]]
#                             writes the BLAS set-ups to try to FILE, one
#                             "name|env assignments" line each, the system
#                             BLAS first ("system BLIS (skx kernels)|BLIS_ARCH_TYPE=0",
#                             "system OpenBLAS|" or "system BLAS (PATH)|"),
#                             then "OpenBLAS DIR|LD_LIBRARY_PATH=DIR" if that
#                             library exists. ARCH: libtensor's BLIS kernel
#                             set (default skx). FETCH_DIR: where OpenBLAS
#                             is not installed and TORCH_OPENBLAS_DIR is
#                             unset, unpack Debian's libopenblas0-pthread
#                             there (apt-get download; nothing is installed,
#                             only torch's process sees it). Returns 1 and
#                             writes no OpenBLAS line when there is none.
#   torch_threads_env N [passive]
#                             the env assignments for a BLAS on N threads
#                             (OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS), with
#                             OMP_WAIT_POLICY=PASSIVE first if "passive"
#   bench_build ROOT BUILD TARGET...
#                             configures BUILD in Release if it has no
#                             CMakeCache.txt, then builds the TARGETs (quiet)
#   bench_header [EXTRA]      the "# date, CPU, N cores[, EXTRA], load before"
#                             line every script prints first

# shellcheck disable=SC2034 # used by the scripts that source this file
TORCH_PY=/usr/bin/python3
TORCH2_PY="${LT_REFERENCE_DIR:-${HOME:-/root}/.cache/libtensor/reference}/bin/python"
[ -x "$TORCH2_PY" ] || TORCH2_PY=
# shellcheck disable=SC2034
TORCH_UNSET="-u OPENBLAS_CORETYPE -u OMP_NUM_THREADS -u OMP_WAIT_POLICY"

torch2_setups() { # FILE [max-autotune]
  {
    echo "eager|--compile none --optim-impl fused"
    echo "compile|--compile default --optim-impl fused"
    [ "${2:-}" != max-autotune ] || echo "max-autotune|--compile max-autotune --optim-impl fused"
  } >"$1"
}

torch_sysblas() {
  env -u LD_LIBRARY_PATH "$TORCH_PY" -c '
import torch
torch.ones(4, 4) @ torch.ones(4, 4)
libs = [l.split()[-1] for l in open("/proc/self/maps") if "libblas" in l or "openblas" in l or "blis" in l]
print(libs[0] if libs else "unknown")' 2>/dev/null || echo unknown
}

blis_arch_number() {
  case "$1" in
    skx) echo 0 ;; zen3) echo 6 ;; zen2) echo 5 ;; zen) echo 4 ;; haswell) echo 3 ;; *) echo ;;
  esac
}

torch_blas_candidates() { # FILE SYSBLAS [ARCH [FETCH_DIR]]
  _tb_arch=${3:-skx}
  case "$2" in
    *blis*) echo "system BLIS ($_tb_arch kernels)|BLIS_ARCH_TYPE=$(blis_arch_number "$_tb_arch")" >"$1" ;;
    *openblas*) echo "system OpenBLAS|" >"$1"; return 0 ;;
    *) echo "system BLAS ($2)|" >"$1" ;;
  esac
  _tb_ob=${TORCH_OPENBLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-pthread}
  if [ ! -f "$_tb_ob/libblas.so.3" ] && [ -z "${TORCH_OPENBLAS_DIR:-}" ] && [ -n "${4:-}" ]; then
    _tb_ob="$4/usr/lib/x86_64-linux-gnu/openblas-pthread"
    if [ ! -f "$_tb_ob/libblas.so.3" ]; then
      mkdir -p "$4"
      (cd "$4" && apt-get download libopenblas0-pthread >/dev/null 2>&1 && dpkg -x libopenblas0-pthread_*.deb .) ||
        echo "# could not fetch libopenblas0-pthread (apt-get download): PyTorch gets only the system BLAS"
    fi
  fi
  [ -f "$_tb_ob/libblas.so.3" ] || return 1
  echo "OpenBLAS $_tb_ob|LD_LIBRARY_PATH=$_tb_ob" >>"$1"
}

torch_threads_env() { # N [passive]
  if [ "${2:-}" = passive ]; then printf 'OMP_WAIT_POLICY=PASSIVE '; fi
  echo "OPENBLAS_NUM_THREADS=$1 BLIS_NUM_THREADS=$1"
}

bench_build() { # ROOT BUILD TARGET...
  _bb_root=$1 _bb_build=$2
  shift 2
  [ -f "$_bb_build/CMakeCache.txt" ] || cmake -S "$_bb_root" -B "$_bb_build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$_bb_build" -j2 --target "$@" >/dev/null
}

bench_header() { # [EXTRA]
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores,${1:+ $1,} load before: $(cut -d' ' -f1-3 /proc/loadavg)"
}
