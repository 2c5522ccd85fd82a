#!/usr/bin/env bash
# Builds programs against an installed gradagg (cmake --install, or the Debian packages) the three
# ways docs/install.md gives, and trains with each against that install's gradagg-server:
#   pkg-config --cflags --libs gradagg           shared
#   find_package(gradagg) -> gradagg::gradagg         shared
#   find_package(gradagg) -> gradagg::gradagg_static  static (no libgradagg.so needed at run time)
#   tests/install/check.sh PREFIX     e.g. build/install/usr, or /usr after apt install
# The program is the SDK example client/examples/softmax_train.c. Exit status 0 when all pass.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
prefix=$(cd "${1:?usage: check.sh PREFIX}" && pwd)
work=$(mktemp -d /tmp/ga_install_check_XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill -KILL "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install check: FAIL $*" >&2; exit 1; }

pc=$(find "$prefix/lib" -name gradagg.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "no gradagg.pc under $prefix/lib"
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
[ "$(pkg-config --modversion gradagg)" = "$(sed -n 's/^project(gradagg VERSION \([0-9.]*\).*/\1/p' \
  "$src/CMakeLists.txt")" ] || fail "pkg-config --modversion gradagg: $(pkg-config --modversion gradagg)"

# shellcheck disable=SC2046 # pkg-config's words are the flags
cc -O2 -o "$work/train_pkgconfig" "$src/client/examples/softmax_train.c" \
  $(pkg-config --cflags --libs gradagg) -lm || fail "build with pkg-config"
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DGA_EXAMPLE="$src/client/examples/softmax_train.c" > "$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; fail "configure with find_package(gradagg)"; }
ninja -C "$work/cmake" > "$work/ninja.log" 2>&1 || { cat "$work/ninja.log"; fail "build with find_package(gradagg)"; }

# The shared programs load the install's libgradagg.so.0 (the loader finds /usr's by itself);
# the static one needs none.
[ "$prefix" = /usr ] || export LD_LIBRARY_PATH="$libdir"
for p in "$work/train_pkgconfig" "$work/cmake/train_shared"; do
  loaded=$(ldd "$p" | awk '$1 == "libgradagg.so.0" { print $3 }')
  [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libgradagg.so.0")" ] ||
    fail "$p loads libgradagg.so.0 from '${loaded}', not from $libdir"
done
! ldd "$work/cmake/train_static" | grep -q libgradagg || fail "train_static links libgradagg.so"

"$prefix/bin/gradagg-server" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --data-dir "$work/data" \
  --log-level warn > "$work/server.out" 2> "$work/server.log" &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^gradagg-server: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/server.out")
  [ -z "$port" ] || break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; fail "gradagg-server did not start"; }
  sleep 0.1
done
[ -n "$port" ] || fail "gradagg-server reported no port: $(cat "$work/server.out")"

# Each trains its own job of one rank from the same seed: the loss falls, and the three builds end
# with the same bits.
finals=()
for p in train_pkgconfig cmake/train_shared cmake/train_static; do
  out=$(timeout 60 "$work/$p" --server "127.0.0.1:$port" --job "$(basename "$p")" --steps 30 --lr 1 2>&1) ||
    { echo "$out"; fail "$p did not train"; }
  first=$(echo "$out" | sed -n 's/^step *1 .* loss \([0-9.]*\) .*/\1/p')
  final=$(echo "$out" | sed -n 's/^final loss \([0-9.]*\) .*/\1/p')
  [ -n "$first" ] && [ -n "$final" ] && grep -q ' steps 30 ' <<< "$out" || { echo "$out"; fail "$p: no 30 steps"; }
  awk -v a="$final" -v b="$first" 'BEGIN { exit !(a < b) }' || fail "$p: loss $first -> $final did not fall"
  echo "install check: $p trained 30 steps: loss $first -> $final"
  finals+=("$(echo "$out" | grep '^final loss ')")
done
[ "${finals[0]}" = "${finals[1]}" ] && [ "${finals[1]}" = "${finals[2]}" ] ||
  fail "the three builds ended differently: ${finals[*]}"
echo "install check: PASS (pkg-config, find_package shared and static against $prefix)"
