#!/usr/bin/env bash
# Configures and builds strata. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR: build (Release). Uses Ninja when available.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo_root/build}"
shift || true
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S "$repo_root" -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$jobs"
