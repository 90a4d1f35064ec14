#!/usr/bin/env bash
# README command (b): install dependencies, build, and run every test — the Release build (unit,
# fixture and slow labels) and an AddressSanitizer + UndefinedBehaviorSanitizer build of the suite.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
asan=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    *) echo "test.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
jobs="$(nproc 2>/dev/null || echo 2)"
scripts/install-deps.sh
scripts/build.sh "$repo_root/build"
ctest --test-dir "$repo_root/build" --output-on-failure -j "$jobs"
if [[ $asan -eq 1 ]]; then
  # The sanitizer build covers the test suite (benchmarks are not built there).
  scripts/build.sh "$repo_root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$repo_root/build-asan" --output-on-failure -j "$jobs" -LE slow
fi
echo "test.sh: all tests passed"
