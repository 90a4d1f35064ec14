#!/usr/bin/env bash
# Configures and builds strata.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...] [-- TARGET...]
# Default BUILD_DIR: build (Release). Uses Ninja when available, and ccache when installed (a
# rebuild, or a second clone on the same machine, then compiles only what changed). Targets after
# `--` build just those (default: everything).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo_root/build}"
shift || true
cmake_args=()
targets=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--" ]]; then
    shift
    targets=("$@")
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
cmake -S "$repo_root" -B "$build_dir" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
if [[ ${#targets[@]} -gt 0 ]]; then
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j "$jobs"
fi
