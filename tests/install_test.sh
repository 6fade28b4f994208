#!/bin/sh
# Installs the build tree into a temporary prefix and builds a tiny consumer
# against it both ways a user would: CMake find_package (shared and static
# targets) and pkg-config. Usage: install_test.sh <build dir> <source dir>
set -eu
build=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake" >/dev/null
"$tmp/cmake/consumer_shared"
"$tmp/cmake/consumer_static"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
# pkg-config's file records the configured prefix; point it at the temporary one.
PKG_CONFIG_PATH="$libdir" cc "$src/tests/consumer/main.c" -o "$tmp/consumer_pc" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --define-variable=prefix="$tmp/prefix" --cflags --libs libtensor)
"$tmp/consumer_pc"
echo "install_test: find_package (shared, static) and pkg-config consumers work"
