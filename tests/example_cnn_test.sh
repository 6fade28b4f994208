#!/bin/sh
# Trains examples/cnn_fashion_mnist or vit_fashion_mnist (the in-tree build; tests/example_test.sh
# already checks building the examples against an installed tree) for a few
# steps and checks that it learns: the mean loss of the last 20 steps well
# below that of the first 20, test accuracy far above chance (0.1), one CSV
# row per step and a checkpoint in --dir (resume is the trainer's, tested with
# the MLP example and tests/test_trainer.c). The 3-epoch run is in docs/vision.md, not here.
# Usage: example_cnn_test.sh <example binary> [steps]
# Exits 77 (ctest: skipped) when the Fashion-MNIST files are not installed.
set -eu
bin=$1; steps=${2:-30}
name=$(basename "$bin")
data=/usr/share/datasets/fashion-mnist
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
  echo "example_cnn_test: SKIPPED: $data not found (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! "$bin" --max-steps "$steps" --log-every 10 --dir "$tmp/run" >"$tmp/out.txt" 2>&1; then
  cat "$tmp/out.txt"
  echo "example_cnn_test: FAILED: $name exited with an error"
  exit 1
fi
cat "$tmp/out.txt"
grep '^summary:' "$tmp/out.txt" | awk -v want="$steps" '{
  for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  ok = v["steps"] == want && v["last_loss"] < 0.7 * v["first_loss"] && v["test_accuracy"] > 0.6
  if (!ok) {
    print "example_cnn_test: FAILED: want " want " steps, last_loss < 0.7 first_loss, test_accuracy > 0.6"
    exit 1
  }
  print "example_cnn_test: the loss fell from " v["first_loss"] " to " v["last_loss"] ", test accuracy " v["test_accuracy"]
}'
rows=$(($(wc -l <"$tmp/run/metrics.csv") - 1))
if [ "$rows" -ne "$steps" ] || ! ls "$tmp/run"/ckpt-*.h5 >/dev/null 2>&1; then
  echo "example_cnn_test: FAILED: $rows CSV rows for $steps steps, or no checkpoint in --dir"
  exit 1
fi
echo "example_cnn_test: $rows CSV rows and a checkpoint in --dir"
