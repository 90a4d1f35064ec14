#!/usr/bin/env bash
# README command (b): install dependencies, build, and run every test:
#   1. the Release build: the fixture, kernels and slow labels' GoogleTest executables and every
#      shell and Node check (the CLI, the server's SDK and chat-page checks);
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build (clang) of the GoogleTest executables
#      (not the slow label): the unit-only ones run here alone (stage 1 leaves them out);
#   3. a ThreadSanitizer build (clang) of the concurrency tests only (ctest -L concurrency: thread
#      pool, io_uring reader, expert cache and tiered store, sessions and prefix cache, server);
#   4. a bounded libFuzzer smoke run of every fuzz target (scripts/fuzz.sh --smoke).
# Usage: scripts/test.sh [--no-asan] [--no-tsan] [--no-fuzz]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
asan=1
tsan=1
fuzz=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    --no-tsan) tsan=0 ;;
    --no-fuzz) fuzz=0 ;;
    *) echo "test.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
jobs="$(nproc 2>/dev/null || echo 2)"
t0=$SECONDS
stage() { echo "test.sh: [$((SECONDS - t0)) s] $*"; }
scripts/install-deps.sh
stage "Release build"
# Without the unit-only GoogleTest executables (STRATA_UNIT_ONLY_TESTS=OFF) when stage 2 builds and
# runs them under ASan/UBSan; built here too they cost a fresh clone ~6 min of compiling and ~2 of
# tests. With --no-asan they are built and run here.
unit_only=OFF
[[ $asan -eq 1 ]] || unit_only=ON
scripts/build.sh "$repo_root/build" -DSTRATA_UNIT_ONLY_TESTS=$unit_only
stage "Release tests"
# ctest headlines "100% tests passed" over skipped tests: the summary after it counts them, with why.
# Each test executable writes its cases' GoogleTest XML to build/gtest-xml (read for their skips).
# run_ctest DIR CTEST_ARGS...: ctest in DIR, then the summary of what it skipped; exits on a failure.
run_ctest() {
  local dir="$1" rc=0
  shift
  rm -rf "$dir/gtest-xml"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --output-junit "$dir/ctest-junit.xml" "$@" || rc=$?
  python3 tests/skip_summary.py "$dir/ctest-junit.xml" "$dir/gtest-xml" || true
  [[ $rc -eq 0 ]] || exit "$rc"
}
run_ctest "$repo_root/build"
# The sanitizer builds keep line tables, not full debug info: a report still names file:line, and
# the libraries compile 13% faster (clang, cli/cmd_bench.cpp under ASan: -g 43.5 s, lines 38.0 s).
lines_only=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
            -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG")
# gtest_executables BUILD_DIR CTEST_ARGS...: the GoogleTest executables (label gtest; each is one
# ctest test named after its target) that ctest selects in BUILD_DIR, configured and not yet built.
# The sanitizer stages build these targets only, then run them by name. Exits when none is selected.
gtest_executables() {
  local dir="$1" listed
  shift
  listed="$(ctest --test-dir "$dir" -N -L gtest "$@")"
  mapfile -t selected < <(sed -n 's/^ *Test *#[0-9]*: //p' <<< "$listed")
  if [[ ${#selected[@]} -eq 0 ]]; then
    echo "test.sh: ctest -N -L gtest $* selects no test executable in $dir:" >&2
    echo "$listed" >&2
    exit 1
  fi
  by_name="^($(IFS='|'; echo "${selected[*]}"))\$"
}
if [[ $asan -eq 1 ]]; then
  # The sanitizer build covers the GoogleTest suite (not the slow label), built with clang, not gcc:
  # on this code an ASan/UBSan compile takes 2-2.5x less CPU with clang 14 than with gcc 12
  # (cli/cmd_bench.cpp at -O2 -g: 77 s -> 31 s). The Release stage above keeps gcc, the compiler users
  # build with. Not here: the CLI binary and the shell and Node checks that drive it (cli.*,
  # server.*), which the Release stage runs: building the CLI's 23 files and running those checks
  # under ASan took ~7 of a fresh CI's ~80 minutes on the 2-core VM; the code under them (the
  # server, runtime, loaders, parsers) is in the GoogleTest executables, and the request parsers are
  # also fuzzed under ASan below.
  stage "ASan/UBSan build"
  asan_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${lines_only[@]}" -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF)
  CC=clang CXX=clang++ scripts/build.sh "$repo_root/build-asan" "${asan_args[@]}" --
  gtest_executables "$repo_root/build-asan" -LE slow
  CC=clang CXX=clang++ scripts/build.sh "$repo_root/build-asan" "${asan_args[@]}" -- "${selected[@]}"
  stage "ASan/UBSan tests (${#selected[@]} executables)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest "$repo_root/build-asan" -R "$by_name"
fi
if [[ $tsan -eq 1 ]]; then
  # Only the test executables that carry the concurrency label are built (and their libraries).
  stage "TSan build (concurrency tests)"
  tsan_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${lines_only[@]}" -DSTRATA_TSAN=ON -DSTRATA_BUILD_BENCH=OFF)
  CC=clang CXX=clang++ scripts/build.sh "$repo_root/build-tsan" "${tsan_args[@]}" --
  gtest_executables "$repo_root/build-tsan" -L concurrency
  CC=clang CXX=clang++ scripts/build.sh "$repo_root/build-tsan" "${tsan_args[@]}" -- "${selected[@]}"
  stage "TSan tests"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$repo_root/tests/tsan.supp" \
    run_ctest "$repo_root/build-tsan" -R "$by_name"
fi
if [[ $fuzz -eq 1 ]]; then
  stage "fuzz smoke"
  scripts/fuzz.sh --smoke 15
fi
stage "all tests passed"
echo "test.sh: all tests passed"
if [[ $asan -eq 1 ]]; then
  echo "test.sh: build/ holds no unit-only test executables (they ran in build-asan); scripts/build.sh builds them there again"
fi
