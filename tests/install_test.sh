#!/bin/sh
# Installs the build tree into a temporary (non-default) prefix and builds tiny
# consumers against it both ways a user would: CMake find_package (the core,
# and the Transformer library shared and static) and pkg-config (libtensor and
# libtensor_transformer, shared and --static). The core consumer calls sqrt,
# so it links only if -lm is passed on. Checks that the .pc files are
# relocatable (no --define-variable: the prefix comes from ${pcfiledir}), that
# --static links the archives (no libtensor*.so needed by the program), and
# that the core library holds none of the model.
# Usage: install_test.sh <build dir> <source dir>
set -eu
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake" >/dev/null
"$tmp/cmake/consumer_core"
"$tmp/cmake/consumer_shared"
"$tmp/cmake/consumer_static"
libdir=$(dirname "$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)")
pc() { PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config "$@"; }
# needs PROGRAM LIB: does PROGRAM's dynamic section name LIB (a libtensor*.so)?
needs() { readelf -d "$1" | grep -q "Shared library: \[$2\.so"; }
expect() { # expect PROGRAM shared|static LIB
  if needs "$1" "$3"; then got=shared; else got=static; fi
  [ "$got" = "$2" ] || { echo "install_test: $1 links $3 $got, expected $2"; readelf -d "$1" | grep NEEDED; exit 1; }
}
cc "$src/tests/consumer/core.c" -o "$tmp/consumer_core_pc" $(pc --cflags --libs libtensor)
"$tmp/consumer_core_pc"; expect "$tmp/consumer_core_pc" shared libtensor
cc "$src/tests/consumer/core.c" -o "$tmp/consumer_core_pc_static" $(pc --static --cflags --libs libtensor)
"$tmp/consumer_core_pc_static"; expect "$tmp/consumer_core_pc_static" static libtensor
cc "$src/tests/consumer/model.c" -o "$tmp/consumer_pc" $(pc --cflags --libs libtensor_transformer)
"$tmp/consumer_pc"; expect "$tmp/consumer_pc" shared libtensor_transformer
cc "$src/tests/consumer/model.c" -o "$tmp/consumer_pc_static" $(pc --static --cflags --libs libtensor_transformer)
"$tmp/consumer_pc_static"; expect "$tmp/consumer_pc_static" static libtensor_transformer
expect "$tmp/consumer_pc_static" static libtensor
# The CMake static target links the archive too.
expect "$tmp/cmake/consumer_static" static libtensor
# Every installed header includes only installed headers (internal ones are not installed).
inc="$tmp/prefix/include/libtensor"
for h in $(find "$inc" -name '*.h'); do
  for d in $(sed -n 's/^#include "\(.*\)"/\1/p' "$h"); do
    [ -f "$inc/$d" ] || { echo "install_test: installed $h includes $d, which is not installed"; exit 1; }
  done
done
[ ! -e "$inc/tensor/vmath.h" ] || { echo "install_test: the internal tensor/vmath.h is installed"; exit 1; }
# The core does not carry the model: no lt_transformer_* / lt_tf_* symbol in libtensor.so,
# except the core's reusable layers (nn/transformer_layer.h: lt_transformer_layer_*,
# lt_transformer_encoder_layer_*, lt_transformer_decoder_layer_*), which any model may use.
core="$libdir/libtensor.so"
model_syms() {
  nm -D --defined-only "$core" | grep -E ' (lt_transformer_|lt_tf_)' |
    grep -vE ' lt_transformer_((encoder|decoder)_)?layer_' || true
}
if [ -n "$(model_syms)" ]; then
  echo "install_test: libtensor.so defines Transformer symbols:"; model_syms
  exit 1
fi
echo "install_test: find_package (core; model shared, static) and pkg-config (libtensor, libtensor_transformer; shared, --static) consumers work from a relocated prefix"
