#!/bin/sh
# The install test (ctest install_consumer): installs the build into a
# temporary prefix, then builds tests/install/consumer.c outside the tree
# twice, through find_package(gpuactor CONFIG) (shared and static) and
# through pkg-config, and runs each build. The prefix is moved after the
# install, so a path recorded at build time would be caught.
# usage: check.sh <build dir> <source dir of this test> <cmake> <C compiler>
#                 [<include path> <library path>]
# The last two are the build's CMAKE_INCLUDE_PATH and CMAKE_LIBRARY_PATH
# (;-lists): where dependencies unpacked outside the system directories are
# (scripts/gpu_check.sh's GPA_DEPS_PREFIX); the consumer needs them too.
set -eu
build=$1 src=$2 cmake=$3 cc=$4 incs=${5:-} libs=${6:-}
if [ -n "$incs$libs" ]; then
  CPATH=$(echo "$incs" | tr ';' ':')${CPATH:+:$CPATH}
  LIBRARY_PATH=$(echo "$libs" | tr ';' ':')${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH LIBRARY_PATH
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpa-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$cmake" --install "$build" --prefix "$tmp/staged" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
mv "$tmp/staged" "$tmp/prefix"
prefix=$tmp/prefix
lib=$(ls -d "$prefix"/lib*/ | head -n1)
for f in include/gpuactor.h include/gpuactor/version.h; do
  [ -f "$prefix/$f" ] || { echo "install: $f missing"; exit 1; }
done
soname=$(readelf -d "$lib/libgpuactor.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libgpuactor.so.0 ] || { echo "install: SONAME is '$soname'"; exit 1; }
# The version script holds: nothing but gpa_* is exported.
if nm -D --defined-only "$lib/libgpuactor.so" | awk '{print $3}' | grep -v '^gpa_' | grep -v '^GPUACTOR_0$' | grep .; then
  echo "install: symbols beyond gpa_* exported"; exit 1
fi

echo "== CMake consumer"
"$cmake" -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_INCLUDE_PATH="$incs" -DCMAKE_LIBRARY_PATH="$libs" >"$tmp/cm.log" 2>&1 ||
  { cat "$tmp/cm.log"; exit 1; }
"$cmake" --build "$tmp/cm" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; exit 1; }
"$tmp/cm/consumer"
"$tmp/cm/consumer_static"

echo "== pkg-config consumer"
if ! command -v pkg-config >/dev/null; then
  echo "skipped: no pkg-config (scripts/setup.sh installs pkgconf)"
  exit 77
fi
# the dependencies' .pc files sit in their library directories' pkgconfig/
PKG_CONFIG_PATH="$lib/pkgconfig"
for d in $(echo "$libs" | tr ';' ' '); do PKG_CONFIG_PATH="$PKG_CONFIG_PATH:$d/pkgconfig"; done
export PKG_CONFIG_PATH
[ "$(pkg-config --modversion gpuactor)" = "$(sed -n 's/#define GPA_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/gpuactor/version.h")" ] ||
  { echo "pkg-config: version differs from version.h"; exit 1; }
# shellcheck disable=SC2046
"$cc" -std=c11 -o "$tmp/consumer_pc" "$src/consumer.c" $(pkg-config --cflags --libs gpuactor)
# the dependencies unpacked outside the system directories stay findable
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/consumer_pc"
# The static link through pkg-config's private flags (the archive named
# instead of -lgpuactor, which would pick the shared library).
# shellcheck disable=SC2046
"$cc" -std=c11 -o "$tmp/consumer_pc_static" "$src/consumer.c" $(pkg-config --cflags gpuactor) \
  $(pkg-config --static --libs gpuactor | sed "s|-lgpuactor|$lib/libgpuactor.a|")
"$tmp/consumer_pc_static"
