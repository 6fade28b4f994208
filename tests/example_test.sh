#!/bin/sh
# Builds examples/ against an INSTALLED libtensor the way a user would, and
# checks that the Fashion-MNIST MLP learns: installs the build tree into a
# temporary prefix, configures the standalone examples/ CMake project with
# find_package(libtensor), compiles the example once more with the pkg-config
# line, then trains for a few hundred steps and checks that the mean loss of
# the last 20 steps is well below that of the first 20, that test accuracy
# is far above chance and that the library's training loop wrote one CSV row
# per step and a checkpoint into --dir (the full run is in docs/tutorial.md,
# not here).
# Usage: example_test.sh <build dir> <source dir> [steps]
# Exits 77 (ctest: skipped) when the Fashion-MNIST files are not installed.
set -eu
build=$1; src=$2; steps=${3:-300}
data=/usr/share/datasets/fashion-mnist
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
  echo "example_test: SKIPPED: $data not found (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cmake" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
cc -O2 "$src/examples/fashion_mnist_mlp.c" -o "$tmp/fashion_mnist_mlp_pc" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --define-variable=prefix="$tmp/prefix" --cflags --libs libtensor)

if ! "$tmp/cmake/fashion_mnist_mlp" --max-steps "$steps" --log-every 50 --dir "$tmp/run" >"$tmp/out.txt" 2>&1; then
  cat "$tmp/out.txt"
  echo "example_test: FAILED: fashion_mnist_mlp exited with an error"
  exit 1
fi
cat "$tmp/out.txt"
summary=$(grep '^summary:' "$tmp/out.txt")
# summary: steps=300 first_loss=2.1 last_loss=0.5 test_accuracy=0.83 train_seconds=4.2
echo "$summary" | awk -v want="$steps" '{
  for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  ok = v["steps"] == want && v["last_loss"] < 0.5 * v["first_loss"] && v["test_accuracy"] > 0.75
  if (!ok) {
    print "example_test: FAILED: want " want " steps, last_loss < first_loss / 2, test_accuracy > 0.75"
    exit 1
  }
  print "example_test: the loss fell from " v["first_loss"] " to " v["last_loss"] ", test accuracy " v["test_accuracy"]
}'
rows=$(($(wc -l <"$tmp/run/metrics.csv") - 1))
if [ "$rows" -ne "$steps" ] || ! ls "$tmp/run"/ckpt-*.h5 >/dev/null 2>&1; then
  echo "example_test: FAILED: $rows CSV rows for $steps steps, or no checkpoint in --dir"
  exit 1
fi
echo "example_test: $rows CSV rows and a checkpoint in --dir"
