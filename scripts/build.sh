#!/usr/bin/env bash
# Configures and builds strata.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...] [-- TARGET...]
# Default BUILD_DIR: build (Release). Uses Ninja when available, and ccache when installed (a
# rebuild, or a second clone on the same machine, then compiles only what changed). Targets after
# `--` build just those (default: everything: the CLI, every test and benchmark); `--` with no
# target after it configures and builds nothing. Every test executable is built unless the extra
# args say -DSTRATA_UNIT_ONLY_TESTS=OFF (scripts/test.sh's Release stage; a later plain build.sh
# puts them back).
# First build on 2 cores (measured on the development VM): `-- strata` (the CLI alone) ~6 min,
# everything ~12 min; ccache and Ninja make later builds compile only what changed.
# Progress: Ninja's [n/N] lines, and a "still building" line whenever 9 s pass in silence-prone
# stretches (a non-terminal shows a compile only when it ends).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo_root/build}"
shift || true
cmake_args=()
targets=()
configure_only=0
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--" ]]; then
    shift
    targets=("$@")
    [[ $# -eq 0 ]] && configure_only=1
    break
  fi
  cmake_args+=("$1")
  shift
done
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$repo_root"  # paths relative to the checkout: clones share the cache
fi
jobs="$(nproc 2>/dev/null || echo 2)"
t0=$SECONDS
what="${targets[*]:-everything (CLI, tests, benchmarks)}"
[[ $configure_only -eq 1 ]] && what="nothing (configure only)"
echo "build.sh: building $what in $build_dir with $jobs jobs (first build on 2 cores: ~6 min for strata alone, ~12 min for everything)"
# A single large file can compile for longer than 10 s, and Ninja prints a line only when a compile
# ends unless the output is a terminal: a ticker says the build is alive meanwhile.
ticker=""
if [[ ! -t 1 ]]; then
  ( while sleep 9; do echo "build.sh: still building ($((SECONDS - t0)) s)"; done ) &
  ticker=$!
  trap '[[ -n "$ticker" ]] && kill "$ticker" 2>/dev/null' EXIT
fi
cmake -S "$repo_root" -B "$build_dir" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DSTRATA_UNIT_ONLY_TESTS=ON "${cmake_args[@]}"
if [[ $configure_only -eq 1 ]]; then
  echo "build.sh: configured $build_dir"
  exit 0
elif [[ ${#targets[@]} -gt 0 ]]; then
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j "$jobs"
fi
echo "build.sh: built $what in $((SECONDS - t0)) s"
