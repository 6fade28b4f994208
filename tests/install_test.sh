#!/bin/sh
# Installs the build tree into a temporary prefix and builds tiny consumers
# against it both ways a user would: CMake find_package (the core, and the
# Transformer library shared and static) and pkg-config (libtensor and
# libtensor_transformer). Also checks that the core library holds none of the
# model. Usage: install_test.sh <build dir> <source dir>
set -eu
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake" >/dev/null
"$tmp/cmake/consumer_core"
"$tmp/cmake/consumer_shared"
"$tmp/cmake/consumer_static"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
# pkg-config's files record the configured prefix; point them at the temporary one.
pc() { PKG_CONFIG_PATH="$libdir" pkg-config --define-variable=prefix="$tmp/prefix" "$@"; }
cc "$src/tests/consumer/core.c" -o "$tmp/consumer_core_pc" $(pc --cflags --libs libtensor)
"$tmp/consumer_core_pc"
cc "$src/tests/consumer/model.c" -o "$tmp/consumer_pc" $(pc --cflags --libs libtensor_transformer)
"$tmp/consumer_pc"
# The core does not carry the model: no lt_transformer_* / lt_tf_* symbol in libtensor.so.
core=$(ls "$(dirname "$libdir")"/libtensor.so)
if nm -D --defined-only "$core" | grep -E ' (lt_transformer_|lt_tf_)' >/dev/null; then
  echo "install_test: libtensor.so defines Transformer symbols:"; nm -D --defined-only "$core" | grep -E ' (lt_transformer_|lt_tf_)'
  exit 1
fi
echo "install_test: find_package (core; model shared, static) and pkg-config (libtensor, libtensor_transformer) consumers work"
