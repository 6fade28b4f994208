#!/bin/sh
# Trains examples/cnn_fashion_mnist or vit_fashion_mnist (the in-tree build; tests/example_test.sh
# already checks building the examples against an installed tree) for a few
# steps and checks that it learns: the mean loss of the last 20 steps well
# below that of the first 20, test accuracy far above chance (0.1), one CSV
# row per step and a checkpoint in --dir (resume is the trainer's, tested with
# the MLP example and tests/test_trainer.c). The 3-epoch run is in docs/vision.md, not here.
# The evaluation runs on the first N_TEST (2000) of the 10k test images (a
# --data folder with the training files linked and the test files cut to
# N_TEST; the loader reads the count from the header): the same code path,
# a fifth of the time (the 10k evaluation was most of the ViT test's time).
# Usage: example_cnn_test.sh <example binary> [steps] [precision]
# precision: f32 (default) or bf16 (--precision bf16: autocast; the banner
# must then name the bf16 path of products and convolutions).
# Exits 77 (ctest: skipped) when the Fashion-MNIST files are not installed.
set -eu
bin=$1; steps=${2:-30}; precision=${3:-f32}
name=$(basename "$bin")
data=/usr/share/datasets/fashion-mnist
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
  echo "example_cnn_test: SKIPPED: $data not found (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
N_TEST=2000
# be32 N: N as 4 big-endian bytes (octal escapes for printf)
be32() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
# cut SRC DST HEADER_REST ITEM_BYTES: the IDX file SRC with its first N_TEST items
cut_idx() {
  { gzip -dc "$1" | head -c 4; be32 "$N_TEST"; gzip -dc "$1" | tail -c +9 | head -c $(($3 + N_TEST * $4)); } | gzip -1 >"$2"
}
mkdir "$tmp/data"
ln -s "$data/train-images-idx3-ubyte.gz" "$data/train-labels-idx1-ubyte.gz" "$tmp/data/"
cut_idx "$data/t10k-images-idx3-ubyte.gz" "$tmp/data/t10k-images-idx3-ubyte.gz" 8 784
cut_idx "$data/t10k-labels-idx1-ubyte.gz" "$tmp/data/t10k-labels-idx1-ubyte.gz" 0 1
if ! "$bin" --data "$tmp/data" --max-steps "$steps" --log-every 10 --dir "$tmp/run" --precision "$precision" \
  >"$tmp/out.txt" 2>&1; then
  cat "$tmp/out.txt"
  echo "example_cnn_test: FAILED: $name exited with an error"
  exit 1
fi
cat "$tmp/out.txt"
if ! grep -q "^data: [0-9]* training and $N_TEST test examples" "$tmp/out.txt"; then
  echo "example_cnn_test: FAILED: the run did not evaluate on the $N_TEST test images given"
  exit 1
fi
if [ "$precision" = bf16 ] && ! grep -q "^precision: bf16 (autocast), bf16 products: .*; convolutions: " "$tmp/out.txt"; then
  echo "example_cnn_test: FAILED: --precision bf16 did not print the bf16 paths"
  exit 1
fi
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
