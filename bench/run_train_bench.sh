#!/bin/sh
# bench/run_train_bench.sh: libtensor against PyTorch 2.x (and Debian's 1.13,
# for history) on full training steps, same machine, same invocation,
# configuration by configuration (see bench/train_step.c for the models and
# the formulas).
#
# Usage: bench/run_train_bench.sh [--configs "small medium encdec"] [--steps N]
#                                 [--precisions "f32 bf16"] [--threads N]
#                                 [--rounds N] [--max-autotune] [--no-torch113]
#                                 [--build DIR] [--quick]
#
# Configurations: small, medium, encdec (the default three) and gpt2,
# gpt2-1024 (GPT-2 124M at T 64 and T 1,024; bench/run_gpt2_bench.sh adds
# llm.c and the physical bound beside them).
#
# Both precisions on both sides by default: f32, and bf16 mixed precision
# (PyTorch: torch.autocast("cpu", dtype=torch.bfloat16) around forward and
# loss; libtensor: --precision bf16, lt_set_autocast).
#
# PyTorch 2.x at its best (the reference environment, ./do.sh reference): in
# the first round every set-up runs the timed steps and the fastest (median
# step) is kept for the later rounds: eager, torch.compile (inductor, default
# mode), and with --max-autotune also mode "max-autotune" (which compiles for
# minutes); always F.scaled_dot_product_attention, AdamW fused=True (bench/torch_setup.py), torch on N
# threads with OMP_WAIT_POLICY=PASSIVE. Compile time is printed apart
# (compile s) and never counted in tokens/s.
#
# PyTorch 1.13 (Debian's python3-torch; --no-torch113 leaves it out): as
# before, a short probe per configuration picks its BLAS and threading
# (bench/lib.sh says which and why); measured once, in the first round.
#
# libtensor: N threads with OMP_WAIT_POLICY=PASSIVE, or 1 thread, whichever
# a short probe finds faster.
#
# Rounds (--rounds, default 1): libtensor and PyTorch 2.x's kept set-up run
# alternately R times; the tables give the medians of the rounds' median
# steps. One line per configuration, precision and round, then the table:
# tokens/s of each column, the ratios, peak RSS (ru_maxrss) of each process,
# and GFLOP/s as a fraction of the GEMM peak measured in the same run (f32
# lt_matmul, and under autocast for bf16).
#
# Builds bench_train_step in Release (DIR, default build-rel) if needed. Each
# side runs one configuration per process, so peak RSS is per configuration.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
configs="small medium encdec"
precisions="f32 bf16"
steps=
threads=2
rounds=1
probe_steps=2
autotune=0
torch113=1
quick=0
BENCH_USAGE='[--configs "small medium encdec gpt2 gpt2-1024"] [--steps N] [--precisions "f32 bf16"] [--threads N] [--rounds N] [--max-autotune] [--no-torch113] [--build DIR] [--quick]'
bench_parse --configs:configs --steps:steps:n --precisions:precisions --threads:threads:n --rounds:rounds:n \
  --max-autotune:autotune=1 --no-torch113:torch113=0 --build:build --quick:quick=1 -- "$@"
# --quick: 3 timed steps (unless --steps says otherwise) and 1 probe step
[ "$quick" = 0 ] || { probe_steps=1; steps=${steps:-3}; }
steps=${steps:-10}
for c in $configs; do
  case "$c" in small | medium | encdec | gpt2 | gpt2-1024) ;; *) echo "$0: unknown configuration '$c'" >&2; exit 2 ;; esac
done
for p in $precisions; do
  case "$p" in f32 | bf16) ;; *) echo "$0: unknown precision '$p'" >&2; exit 2 ;; esac
done
exe="$build/bench/bench_train_step"

bench_build "$root" "$build" bench_train_step

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

bench_header
[ -n "$TORCH2_PY" ] || echo "# no reference environment (./do.sh reference): no PyTorch 2.x column"
[ -z "$TORCH2_PY" ] || echo "# PyTorch 2.x: torch $("$TORCH2_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($TORCH2_PY)"
[ -x "$TORCH_PY" ] && "$TORCH_PY" -c 'import torch' 2>/dev/null || torch113=0

# libtensor's BLIS kernel set (its number for BLIS_ARCH_TYPE).
arch=$("$exe" --config small --steps 1 --warmup 0 --no-peak | sed -n 's/.*BLIS kernels \([a-z0-9]*\).*/\1/p')

cands="$tmp/cands"
if [ "$torch113" = 1 ]; then
  sysblas=$(torch_sysblas)
  echo "# torch 1.13's default BLAS: $sysblas"
  torch_blas_candidates "$cands" "$sysblas" "$arch" "$build/openblas" || true
fi

# run_torch PY CONFIG STEPS WARMUP TORCH_THREADS "ENV" TIMEOUT PRECISION [ARGS...] -> one CSV line
# (nothing when it fails or runs out of time).
run_torch() {
  _py=$1 _c=$2 _s=$3 _w=$4 _t=$5 _e=$6 _to=$7 _p=$8
  shift 8
  # shellcheck disable=SC2086
  # shellcheck disable=SC2046
  env $(torch_unset "$_py") $_e timeout "$_to" \
    "$_py" "$here/train_step_torch.py" --config "$_c" --steps "$_s" --warmup "$_w" --threads "$_t" --precision "$_p" "$@" \
    2>>"$tmp/torch.err" | tail -1
}
run_lt() { # CONFIG STEPS WARMUP THREADS "ENV" PRECISION -> CSV line
  # shellcheck disable=SC2046
  env -u OMP_WAIT_POLICY $(echo "$5" | grep -v unset) "$exe" --config "$1" --steps "$2" --warmup "$3" \
    --threads "$4" --no-peak --csv --precision "$6" | tail -1
}
field() { echo "$1" | cut -d, -f"$2"; }
dash() { if [ -n "$1" ]; then echo "$1"; else echo -; fi; } # a table cell: "-" when empty

peak_of() {
  OMP_WAIT_POLICY=PASSIVE "$exe" --config small --steps 1 --warmup 0 --threads "$threads" --precision "$1" |
    sed -n 's/^GEMM peak.*: \([0-9.]*\) GFLOP.*/\1/p'
}
peak_f32=$(peak_of f32)
peak_bf16=
case " $precisions " in *" bf16 "*) peak_bf16=$(peak_of bf16) ;; esac

setups="$tmp/setups" # PyTorch 2.x set-ups: "name|train_step_torch.py flags"
torch2_setups "$setups" "$([ "$autotune" = 0 ] || echo max-autotune)"
pt2_env=$(torch_threads_env "$threads" passive)

table="$tmp/table" # config prec round lt_tok pt2_tok pt113_tok lt_mib pt2_mib pt113_mib gflop_s
: >"$table"
log="$tmp/log"
: >"$log"
printf '\n%-9s %-4s %2s | %9s %7s %7s | %9s %7s %7s %8s %-12s | %9s %7s | %s\n' config prec rd "lt tok/s" "lt ms" "lt MiB" \
  "pt2 tok/s" "pt2 ms" "pt2 MiB" "compile" "pt2 set-up" "113 tok/s" "113 MiB" "lt settings"
for c in $configs; do
for prec in $precisions; do
  if [ "$prec" = bf16 ]; then peak=$peak_bf16; else peak=$peak_f32; fi
  warm=2
  # libtensor: the choice between N threads (OMP_WAIT_POLICY=PASSIVE) and 1.
  lt_best_ms=; lt_best_t=; lt_best_env=
  for lt_t in "$threads" 1; do
    if [ "$lt_t" = 1 ]; then e="OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"; else e="OMP_WAIT_POLICY=PASSIVE"; fi
    ms=$(field "$(run_lt "$c" "$probe_steps" 1 "$lt_t" "$e" "$prec")" 7)
    echo "# probe $c $prec: libtensor threads $lt_t, $e: min $ms ms/step" >>"$log"
    if [ -z "$lt_best_ms" ] || awk "BEGIN{exit !($ms < $lt_best_ms)}"; then
      lt_best_ms=$ms; lt_best_t=$lt_t; lt_best_env=$e
    fi
    [ "$threads" = 1 ] && break
  done
  # PyTorch 1.13, once: probe every candidate BLAS and threading, time the fastest.
  pt113=
  if [ "$torch113" = 1 ]; then
    best_ms=; best_env=; best_tt=
    while IFS='|' read -r name envs; do
      for tt in 1 "$threads"; do
        if [ "$tt" = 1 ]; then e="$envs $(torch_threads_env "$threads")"
        else e="$envs $(torch_threads_env "$threads" passive)"; fi
        ms=$(field "$(run_torch "$TORCH_PY" "$c" "$probe_steps" 1 "$tt" "$e" 600 "$prec" || true)" 7)
        [ -n "$ms" ] || continue
        echo "# probe $c $prec: torch 1.13 threads $tt, $name, $e: min $ms ms/step" >>"$log"
        if [ -z "$best_ms" ] || awk "BEGIN{exit !($ms < $best_ms)}"; then best_ms=$ms; best_env=$e; best_tt=$tt; fi
        [ "$tt" = "$threads" ] && break
      done
    done <"$cands"
    [ -z "$best_ms" ] || pt113=$(run_torch "$TORCH_PY" "$c" "$steps" 2 "$best_tt" "$best_env" 3600 "$prec")
    echo "# torch 1.13 $c $prec (threads $best_tt, $best_env): $pt113" >>"$log"
  fi
  kept=
  # A round: libtensor, then PyTorch 2.x (round 1: every set-up, the fastest
  # kept for the later rounds), then the round's row.
  side() { # lt|pt2 ROUND
    r=$2
    if [ "$1" = lt ]; then
      lt=$(run_lt "$c" "$steps" "$warm" "$lt_best_t" "$lt_best_env" "$prec")
      echo "# lt $c $prec round $r: $lt" >>"$log"
      return 0
    fi
    pt2=; pt2_name=
    if [ -n "$TORCH2_PY" ]; then
      if [ -z "$kept" ]; then # round 1: every set-up; keep the fastest
        while IFS='|' read -r name flags; do
          # shellcheck disable=SC2086
          line=$(run_torch "$TORCH2_PY" "$c" "$steps" "$warm" "$threads" "$pt2_env" 3600 "$prec" $flags || true)
          echo "# torch 2.x $c $prec $name ($flags, $pt2_env): ${line:-failed}" >>"$log"
          [ -n "$line" ] || continue
          if [ -z "$pt2" ] || awk "BEGIN{exit !($(field "$line" 6) < $(field "$pt2" 6))}"; then pt2=$line; pt2_name=$name; fi
        done <"$setups"
        kept=$pt2_name
      else
        flags=$(sed -n "s/^$kept|//p" "$setups")
        # shellcheck disable=SC2086
        pt2=$(run_torch "$TORCH2_PY" "$c" "$steps" "$warm" "$threads" "$pt2_env" 3600 "$prec" $flags || true)
        pt2_name=$kept
        echo "# torch 2.x $c $prec $kept round $r: $pt2" >>"$log"
      fi
    fi
    # lt csv: config,threads,params,tokens,tok_s,ms_med,ms_min,peak_mib,base_mib,gflop,gflops,frac_peak,...
    # pt csv: config,torch_threads,params,tokens,tok_s,ms_med,ms_min,peak_mib,base_mib,loss0,loss1,compile_s
    gfs=$(awk "BEGIN{printf \"%.1f\", $(field "$lt" 10) / ($(field "$lt" 6) * 1e-3)}")
    printf '%-9s %-4s %2s | %9.0f %7.1f %7.0f | %9s %7s %7s %8s %-12s | %9s %7s | %s thr\n' "$c" "$prec" "$r" \
      "$(field "$lt" 5)" "$(field "$lt" 6)" "$(field "$lt" 8)" "${pt2:+$(field "$pt2" 5)}" "${pt2:+$(field "$pt2" 6)}" \
      "${pt2:+$(field "$pt2" 8)}" "${pt2:+$(field "$pt2" 12)s}" "${pt2_name:--}" "${pt113:+$(field "$pt113" 5)}" \
      "${pt113:+$(field "$pt113" 8)}" "$lt_best_t"
    echo "$c $prec $r $(field "$lt" 5) $(dash "${pt2:+$(field "$pt2" 5)}") $(dash "${pt113:+$(field "$pt113" 5)}")" \
      "$(field "$lt" 8) $(dash "${pt2:+$(field "$pt2" 8)}") $(dash "${pt113:+$(field "$pt113" 8)}") $gfs $(dash "$pt2_name")" >>"$table"
  }
  bench_alternate "$rounds" side lt pt2
done
done
echo
printf '%-9s %-4s | %9s %9s %9s | %7s %7s | %7s %7s %7s | %7s %7s | %s\n' config prec "lt tok/s" "pt2 tok/s" "113 tok/s" \
  "lt/pt2" "lt/113" "lt MiB" "pt2 MiB" "113 MiB" "GFLOP/s" "of peak" "pt2 set-up"
for c in $configs; do
for prec in $precisions; do
  if [ "$prec" = bf16 ]; then peak=$peak_bf16; else peak=$peak_f32; fi
  m() { awk -v c="$c" -v p="$prec" -v k="$1" '$1 == c && $2 == p && $k != "-" { print $k }' "$table" | bench_median; }
  lt_tok=$(m 4) pt2_tok=$(m 5) pt113_tok=$(m 6) gfs=$(m 10)
  lt_mib=$(m 7) pt2_mib=$(m 8) pt113_mib=$(m 9)
  name=$(awk -v c="$c" -v p="$prec" '$1 == c && $2 == p { n = $11 } END { print n }' "$table")
  ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk "BEGIN{printf \"%.2fx\", $1 / $2}"; else echo -; fi; }
  v() { if [ -n "$1" ]; then printf '%.0f' "$1"; else echo -; fi; }
  printf '%-9s %-4s | %9s %9s %9s | %7s %7s | %7s %7s %7s | %7s %7s | %s\n' "$c" "$prec" "$(v "$lt_tok")" "$(v "$pt2_tok")" \
    "$(v "$pt113_tok")" "$(ratio "$lt_tok" "$pt2_tok")" "$(ratio "$lt_tok" "$pt113_tok")" "$(v "$lt_mib")" "$(v "$pt2_mib")" \
    "$(v "$pt113_mib")" "$gfs" "$(awk "BEGIN{printf \"%.0f%%\", 100 * $gfs / $peak}")" "$name"
done
done
echo
echo "# tok/s from the median step of $steps timed steps after 2 warm-up steps, median over $rounds round(s);"
echo "# lt/pt2 > 1: libtensor faster than PyTorch 2.x's fastest set-up; 113 = Debian's torch 1.13 at its best BLAS"
echo "# (history). MiB = peak RSS (ru_maxrss) of the process (torch's includes its import: ~530 MiB for 2.x)."
echo "# GFLOP/s = libtensor's (6 * params * tokens + attention) / median step; 'of peak' against lt_matmul's best"
echo "# square product on $threads threads in the same run: f32 $peak_f32 GFLOP/s, bf16 (autocast) ${peak_bf16:--} GFLOP/s."
echo "# libtensor BLIS kernels: $arch. load after: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$log"
[ ! -s "$tmp/torch.err" ] || grep -v '^#\|^W1\|No CUDA runtime\|warn' "$tmp/torch.err" | sort | uniq -c | sort -rn | head -5 | sed 's/^/# torch stderr: /'
