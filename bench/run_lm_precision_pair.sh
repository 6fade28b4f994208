#!/bin/sh
# bench/run_lm_precision_pair.sh: the language-model quality pair of issue 14
# (docs/mixed-precision.md, "Quality"): one decoder-only model trained on a
# text file twice, in f32 and with --precision bf16 (autocast), same seed and
# data, and the two validation-loss curves side by side with their relative
# difference ("within 1% of the f32 run's after the same number of steps").
#
# Usage: bench/run_lm_precision_pair.sh [--steps N] [--eval-every N]
#                                       [--text FILE] [--build DIR]
#                                       [--serial] [--out DIR] [--train EXE]
#                                       [--model "train flags"]
#
# Defaults: a 0.25M-parameter GPT (d_model 64, 4 heads, 4 layers, d_ff 256,
# 128-character context, batch 16, lr 3e-3, dropout 0.1) on
# /usr/share/common-licenses/GPL-3 for 800 steps, validation every 50: about a
# quarter of docs/train.md's 0.87M-parameter model (--model "--d-model 128
# --layers 4 --batch 16 --lr 3e-3"), so that each run takes at most about 10
# minutes on a loaded 2-core machine. The two runs go side by side on one thread
# each (one per core of a 2-core machine; --serial: one after the other on 2
# threads). Dropout and data order come from the seed, so the two runs differ
# only in the precision of their matrix products. Builds train in Release
# (DIR, default build-rel) if needed, unless --train names the program. Prints a markdown table (steps in
# columns) and the final relative difference; the runs' logs and metrics are
# kept in --out (default runs/lm-pair-<date>-<time>).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
steps=800
every=50
text=/usr/share/common-licenses/GPL-3
serial=0
out=""
train=""
model="--d-model 64 --heads 4 --layers 4 --d-ff 256 --seq-len 128 --batch 16 --lr 3e-3"
BENCH_USAGE="[--steps N] [--eval-every N] [--text FILE] [--build DIR] [--serial] [--out DIR] [--train EXE] [--model FLAGS]"
bench_parse --steps:steps:n --eval-every:every:n --text:text --build:build --serial:serial=1 --out:out --train:train \
  --model:model -- "$@"
[ -r "$text" ] || { echo "$0: cannot read $text" >&2; exit 1; }
[ -n "$out" ] || out="$root/runs/lm-pair-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
[ -n "$train" ] || train="$build/models/transformer/train"
[ -x "$train" ] || bench_build "$root" "$build" train
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
threads=1
[ "$serial" = 1 ] && threads=2
run() { # precision
  # shellcheck disable=SC2086 # $model is a list of flags
  "$train" --arch decoder-only --text "$text" $model --seed 1 \
    --steps "$steps" --eval-every "$every" --gen-tokens 0 --threads "$threads" --precision "$1" \
    --ckpt-dir "$out/$1" >"$out/$1.log" 2>&1 || { echo "$0: the $1 run failed, see $out/$1.log" >&2; return 1; }
}
echo "train $model --steps $steps --eval-every $every --seed 1 --precision f32|bf16 (--text $text)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(bench_now)
if [ "$serial" = 1 ]; then
  run f32; run bf16
else
  run f32 & p1=$!
  run bf16 & p2=$!
  ok=0
  wait $p1 || ok=1
  wait $p2 || ok=1
  [ $ok = 0 ] || exit 1
fi
t1=$(bench_now)
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); wall time $(awk "BEGIN{printf \"%.0f\", $t1 - $t0}") s ($threads thread(s) per run, $([ "$serial" = 1 ] && echo one after the other || echo side by side))"
for p in f32 bf16; do
  echo "$p: $(grep -m1 '^model:' "$out/$p.log"); $(grep -m1 'tokens/s' "$out/$p.log" || true)"
done
# val_loss at every validated step of both runs: "step f32 bf16"
awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) if ($i == "val_loss") c = i; f++; next }
         $c != "" { v[f, $1] = $c; if (f == 1) s[++n] = $1 }
         END { for (i = 1; i <= n; i++) print s[i], v[1, s[i]], v[2, s[i]] }' \
  "$out/f32/metrics.csv" "$out/bf16/metrics.csv" >"$out/curves.txt"
[ -s "$out/curves.txt" ] || { echo "$0: no validation losses in $out/*/metrics.csv" >&2; exit 1; }
awk '{ st[NR] = $1; a[NR] = $2; b[NR] = $3 }
     END {
       printf "| validation loss at step |"; for (i = 1; i <= NR; i++) printf " %s |", st[i]; printf "\n|---|"
       for (i = 1; i <= NR; i++) printf "---:|"; printf "\n| f32 |"
       for (i = 1; i <= NR; i++) printf " %.4f |", a[i]; printf "\n| bf16 (autocast) |"
       for (i = 1; i <= NR; i++) printf " %.4f |", b[i]; printf "\n| bf16 / f32 - 1 |"
       m = 0
       for (i = 1; i <= NR; i++) { d = 100 * (b[i] / a[i] - 1); printf " %+.2f%% |", d; if (d < 0) d = -d; if (d > m) m = d }
       printf "\n\nfinal (step %s): f32 %.4f, bf16 %.4f, bf16 / f32 - 1 = %+.2f%%; largest |difference| over the curve %.2f%%\n",
              st[NR], a[NR], b[NR], 100 * (b[NR] / a[NR] - 1), m
     }' "$out/curves.txt" | tee "$out/table.md"
