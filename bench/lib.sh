# shellcheck shell=sh
# bench/lib.sh: what every bench/ script shares, in one place (POSIX sh). A
# script starts with
#
#   here=$(cd "$(dirname "$0")" && pwd)
#   . "$here/lib.sh"
#
# and gets: root (the source tree), build (default $root/build-rel), the
# option parser, the clocks, the median, the A/B alternation, the build and
# header helpers, and the PyTorch environment. Nothing here exits except
# bench_usage and bench_parse on a bad command line (exit 2); the rest
# returns statuses. tests/bench_lib_test.sh (ctest bench_lib) tests the
# parser, the counts, the median and the alternation.
#
# Options
#   BENCH_USAGE               the script's usage text (its flags), set before
#                             bench_parse or bench_usage
#   bench_usage               prints "usage: $0 $BENCH_USAGE" to stderr, exit 2
#   bench_count FLAG VALUE    exits 2 unless VALUE is a whole number from 1 to
#                             999999999 (a typo would otherwise run nothing or
#                             loop forever)
#   bench_parse SPEC... -- "$@"
#                             parses the command line; each SPEC is one word:
#     --flag:var              the flag takes a value, stored in var
#     --flag:var:n            a whole number from 1 (bench_count)
#     --flag:var:ns           whole numbers from 1, comma- or space-separated,
#                             stored space-separated
#     --flag:var=VALUE        a switch (no value): sets var to VALUE; the
#                             "flag" may also be a plain word (run_vision's cnn)
#     @rest:var               unknown words are appended to var (passed on)
#     @after:var              after "--", every word is appended to var
#                             An unknown flag without @rest is an error.
#
# Clocks and statistics
#   bench_now                 wall-clock seconds (date +%s.%N)
#   bench_load                the 1-minute load average
#   bench_cpu_ms FILE CMD...  runs CMD (its output passes through) and writes
#                             the CPU milliseconds of its process and children
#                             to FILE: perf's task-clock when perf works, else
#                             user + system from /usr/bin/time, else "nan";
#                             returns CMD's status
#   bench_median              the median of the numbers on stdin (the mean of
#                             the middle two for an even count; empty input:
#                             an empty line)
#   bench_max                 the largest number on stdin
#
# A/B alternation
#   bench_alternate ROUNDS FUNC SIDE...
#                             calls "FUNC SIDE ROUND" for ROUND 1..ROUNDS
#                             (0 runs nothing), every SIDE in order within a
#                             round: the sides alternate, so a change in the
#                             machine's load hits all of them (one run's time
#                             varies 1.5-2x on a shared machine). Stops at the
#                             first failing call and returns its status. FUNC
#                             must not call bench_alternate itself.
#
# Build and header
#   bench_build ROOT BUILD TARGET...
#                             configures BUILD in Release if it has no
#                             CMakeCache.txt, then builds the TARGETs (quiet)
#   bench_header [EXTRA]      the "# date, CPU, N cores[, EXTRA], load before"
#                             line every script prints first
#
# PyTorch
#   Why. Debian's python3-torch (1.13) calls whatever libblas.so.3 the
#   system's alternatives point to; on the project's machines that is BLIS,
#   whose runtime picks its slow 'generic' kernels unless BLIS_ARCH_TYPE names
#   a kernel set, and OPENBLAS_CORETYPE=Haswell (and OPENBLAS_L2_SIZE) in the
#   environment halve OpenBLAS's speed. So a script measures torch 1.13 with
#   every BLAS it can be given and keeps the fastest:
#     - the system libblas.so.3 (BLIS: with BLIS_ARCH_TYPE set to the kernel
#       set libtensor chose, skx when the script does not know it);
#     - OpenBLAS from $TORCH_OPENBLAS_DIR or
#       /usr/lib/x86_64-linux-gnu/openblas-pthread (first on LD_LIBRARY_PATH),
#       unless the system BLAS is OpenBLAS already;
#   always with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset and
#   OMP_WAIT_POLICY=PASSIVE where torch runs more than one thread (idle OpenMP
#   threads then sleep instead of spinning against the BLAS threads). How many
#   threads each script probes is its own choice (its header comment says).
#   PyTorch 2.x is the reference environment's (./do.sh reference,
#   docs/testing.md): a pip wheel with MKL and oneDNN linked in, so none of
#   the BLAS choices apply to it and its OpenBLAS settings are left alone;
#   what is chosen for it is the set-up (eager, torch.compile, its mode) and
#   the threads.
#
#   TORCH_PY                  the Python that has Debian's torch 1.13: /usr/bin/python3
#   TORCH2_PY                 the reference environment's Python (torch 2.x), or
#                             empty when ./do.sh reference has not made it
#                             ($LT_REFERENCE_DIR, else ~/.cache/libtensor/reference)
#   torch_unset PY            the "env" flags that clear what would slow that
#                             Python's torch or override its thread count:
#                             env $(torch_unset "$py") VAR=... "$py" script.py
#                             (the OpenBLAS settings only for TORCH_PY)
#   torch2_setups FILE [max-autotune]
#                             writes PyTorch 2.x's set-ups to try to FILE, one
#                             "name|twin flags" line each (bench/torch_setup.py
#                             reads the flags): eager, torch.compile in its
#                             default mode, and with "max-autotune" that mode
#                             too; always the fused optimizer
#   torch_sysblas             the BLAS library torch 1.13 loads by default (a
#                             path from /proc/self/maps), or "unknown"
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

root=$(dirname "${here:?bench/lib.sh: set here to the bench/ directory before sourcing it}")
# shellcheck disable=SC2034 # the scripts read it
build="$root/build-rel"
BENCH_USAGE=${BENCH_USAGE:-}

bench_usage() {
  echo "usage: $0 $BENCH_USAGE" >&2
  exit 2
}

bench_count() { # FLAG VALUE
  case "$2" in
    '' | *[!0-9]* | 0* | ??????????*) echo "$0: $1 takes a whole number from 1 to 999999999, not '$2'" >&2; exit 2 ;;
  esac
}

bench_parse() { # SPEC... -- ARGS...
  _bp_specs=
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    _bp_specs="$_bp_specs $1"
    shift
  done
  [ $# -gt 0 ] || { echo "bench_parse: no -- after the specs" >&2; exit 2; }
  shift
  while [ $# -gt 0 ]; do
    _bp_hit=
    for _bp_s in $_bp_specs; do
      [ "${_bp_s%%:*}" = "$1" ] || continue
      _bp_r=${_bp_s#*:}
      case "$_bp_r" in
        *=*) # a switch
          eval "${_bp_r%%=*}=\${_bp_r#*=}"
          shift ;;
        *)
          [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; bench_usage; }
          _bp_v=$2
          case "$_bp_r" in
            *:n) bench_count "$1" "$_bp_v" ;;
            *:ns)
              _bp_v=$(echo "$_bp_v" | tr , ' ')
              for _bp_x in $_bp_v; do bench_count "$1" "$_bp_x"; done
              [ -n "$_bp_v" ] || bench_count "$1" "" ;;
          esac
          eval "${_bp_r%%:*}=\$_bp_v"
          shift 2 ;;
      esac
      _bp_hit=1
      break
    done
    [ -z "$_bp_hit" ] || continue
    case " $_bp_specs " in
      *" @after:"*) if [ "$1" = -- ]; then
          _bp_var=${_bp_specs#*@after:}
          _bp_var=${_bp_var%% *}
          shift
          eval "$_bp_var=\"\$*\""
          return 0
        fi ;;
    esac
    case " $_bp_specs " in
      *" @rest:"*)
        _bp_var=${_bp_specs#*@rest:}
        _bp_var=${_bp_var%% *}
        eval "$_bp_var=\"\${$_bp_var:+\$$_bp_var }\$1\""
        shift ;;
      *) echo "$0: unknown option $1" >&2; bench_usage ;;
    esac
  done
}

bench_now() { date +%s.%N; }

bench_load() { cut -d' ' -f1 /proc/loadavg; }

bench_cpu_ms() { # FILE CMD...
  _bc_out=$1
  shift
  # CMD's status comes from a file its wrapper writes, not from perf's or
  # time's exit status (perf stat has returned 0 for a failing command).
  _bc_run='"$@"; echo $? >"$BENCH_CPU_ST"'
  rm -f "$_bc_out.st"
  if command -v perf >/dev/null 2>&1 && perf stat -e task-clock -x, true >/dev/null 2>&1; then
    BENCH_CPU_ST="$_bc_out.st" perf stat -e task-clock -x, -o "$_bc_out.perf" sh -c "$_bc_run" sh "$@" || true
    grep task-clock "$_bc_out.perf" 2>/dev/null | cut -d, -f1 >"$_bc_out"
    rm -f "$_bc_out.perf"
  elif [ -x /usr/bin/time ]; then
    BENCH_CPU_ST="$_bc_out.st" /usr/bin/time -f '%U %S' -o "$_bc_out.time" sh -c "$_bc_run" sh "$@" || true
    awk '{ printf "%.0f\n", 1000 * ($1 + $2) }' "$_bc_out.time" >"$_bc_out" 2>/dev/null
    rm -f "$_bc_out.time"
  else
    BENCH_CPU_ST="$_bc_out.st" sh -c "$_bc_run" sh "$@"
    echo nan >"$_bc_out"
  fi
  _bc_st=$(cat "$_bc_out.st" 2>/dev/null || echo 127)
  rm -f "$_bc_out.st"
  return "${_bc_st:-127}"
}

bench_median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

bench_max() { sort -g | tail -1; }

bench_alternate() { # ROUNDS FUNC SIDE...
  _ba_n=$1 _ba_f=$2
  shift 2
  case "$_ba_n" in '' | *[!0-9]*) echo "bench_alternate: ROUNDS is '$_ba_n', not a whole number" >&2; return 2 ;; esac
  _ba_r=1
  while [ "$_ba_r" -le "$_ba_n" ]; do
    for _ba_side in "$@"; do
      "$_ba_f" "$_ba_side" "$_ba_r" || return $?
    done
    _ba_r=$((_ba_r + 1))
  done
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

# shellcheck disable=SC2034 # used by the scripts that source this file
TORCH_PY=/usr/bin/python3
TORCH2_PY="${LT_REFERENCE_DIR:-${HOME:-/root}/.cache/libtensor/reference}/bin/python"
[ -x "$TORCH2_PY" ] || TORCH2_PY=

torch_unset() { # PY
  if [ "$1" = "$TORCH_PY" ]; then
    echo "-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_NUM_THREADS -u OMP_WAIT_POLICY"
  else
    echo "-u OMP_NUM_THREADS -u OMP_WAIT_POLICY"
  fi
}

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
