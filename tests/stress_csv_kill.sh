#!/bin/bash
# Manual stress test (not in ctest: about a minute): SIGKILL `train --resume`
# at a random moment in its first 400 ms, while it rewrites metrics.csv (the
# resumed checkpoint, step 180, is older than the CSV's last row, 200), then
# check that the CSV is complete: the header, one 14-column row per step from
# 1 on, at least up to the resumed step, a final newline, no temporary left.
#   tests/stress_csv_kill.sh [build dir] [trials]
set -u
B=$(cd "${1:-build}" && pwd); n=${2:-60}
T=$B/models/transformer/train
w=$(mktemp -d); cd "$w" || exit 1
$T --task reverse --d-model 32 --heads 2 --layers 1 --d-ff 64 --task-train 2000 --task-valid 50 --steps 400 \
   --eval-every 0 --ckpt-every 20 --keep 0 --stop-after 200 --ckpt-dir run --threads 1 > /dev/null || exit 1
ok=0; bad=0; before=0
for i in $(seq 1 "$n"); do
  rm -rf r; cp -a run r; rm r/ckpt-000000000200.h5
  $T --resume r --steps 400 --threads 1 > /dev/null 2>&1 &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  f=r/metrics.csv
  rows=$(tail -n +2 $f | wc -l)
  badrows=$(tail -n +2 $f | awk -F, 'NF!=14 || $1!=NR' | wc -l)
  if [ "$(head -1 $f)" = "$(head -1 run/metrics.csv)" ] && [ "$rows" -ge 180 ] && [ "$badrows" -eq 0 ] &&
     [ -z "$(tail -c1 $f)" ] && ! ls r | grep -q tmp; then
    ok=$((ok + 1)); [ "$rows" -eq 200 ] && before=$((before + 1))
  else
    bad=$((bad + 1)); echo "trial $i: $rows rows, $badrows malformed"
  fi
done
rm -rf "$w"
echo "csv kill trials: $ok of $n complete ($before killed before the rewrite), $bad broken"
[ "$bad" -eq 0 ]
