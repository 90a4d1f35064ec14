#!/usr/bin/env bash
# libFuzzer runs of the fuzz/ targets (fuzz/README.md).
#
#   scripts/fuzz.sh TARGET SECONDS [LIBFUZZER_FLAG...]   build, then fuzz one target for SECONDS
#   scripts/fuzz.sh --smoke SECONDS                      every target SECONDS each, one per core at a
#                                                        time; exit 1 on any crash, leak, timeout or
#                                                        OOM (what CI runs)
#   scripts/fuzz.sh --build                              build every target, run nothing
#   scripts/fuzz.sh --list                               the target names
#
# Builds into build-fuzz/ (STRATA_FUZZ_BUILD overrides) with clang, Ninja and ccache (when installed):
# STRATA_FUZZ=ON, no tests or benchmarks, only the fuzz executables. The seed corpus fuzz/corpus/TARGET
# is copied into a scratch directory first, so runs never write into the repository; inputs that
# crash are copied to build-fuzz/findings/TARGET/ and named in the output. Set STRATA_FUZZ_CORPUS_OUT=DIR
# to keep the grown corpus of a single-target run (e.g. to minimise it into fuzz/corpus/ by hand).
# Environment: STRATA_FUZZ_JOBS (ninja -j, default 2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${STRATA_FUZZ_BUILD:-$ROOT/build-fuzz}"
TARGETS=(safetensors gguf config tokenizer session chat_request completion_request api_request output_parser http_request)

# Largest input per target: a few times the largest seed, small enough to keep runs fast.
max_len() {
  case "$1" in
    safetensors) echo 16384 ;;
    gguf) echo 16384 ;;
    config) echo 8192 ;;
    tokenizer) echo 32768 ;;
    session) echo 65536 ;;
    chat_request) echo 16384 ;;
    completion_request) echo 8192 ;;
    api_request) echo 16384 ;;
    output_parser) echo 8192 ;;
    http_request) echo 16384 ;;
    *) echo "unknown target '$1' (scripts/fuzz.sh --list)" >&2; exit 2 ;;
  esac
}

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

build() {
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
  fi
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF \
      "${launcher[@]}" >/dev/null
  fi
  local exes=()
  for t in "$@"; do exes+=("${t}_fuzz"); done
  ninja -C "$BUILD" -j "${STRATA_FUZZ_JOBS:-2}" "${exes[@]}"
}

# run TARGET SECONDS [FLAGS...]: prints one summary line; returns libFuzzer's status.
run() {
  local t="$1" secs="$2"
  shift 2
  local exe="$BUILD/fuzz/${t}_fuzz"
  if [[ "$t" == session ]]; then
    local ck="${STRATA_FUZZ_TINY_CHECKPOINT:-$ROOT/../shared/fixtures/v41-tiny/checkpoint}"
    if [[ ! -f "$ck/config.json" ]]; then
      echo "$t: SKIP (tiny fixture checkpoint missing: $ck)"
      return 0
    fi
  fi
  local scratch
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz-$t.XXXXXX")"
  mkdir -p "$scratch/corpus" "$scratch/artifacts" "$scratch/tmp"
  if [[ -d "$ROOT/fuzz/corpus/$t" ]]; then cp -r "$ROOT/fuzz/corpus/$t/." "$scratch/corpus/"; fi
  local flags=(-max_total_time="$secs" -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10
               -print_final_stats=1 -artifact_prefix="$scratch/artifacts/")
  if [[ -f "$ROOT/fuzz/dict/$t.dict" ]]; then flags+=(-dict="$ROOT/fuzz/dict/$t.dict"); fi
  local status=0
  (cd "$scratch/tmp" && TMPDIR="$scratch/tmp" \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$exe" "${flags[@]}" "$@" "$scratch/corpus") >"$scratch/log" 2>&1 || status=$?
  local runs rate files found=""
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$scratch/log" | tail -1)"
  if [[ -z "$runs" ]]; then  # -fork mode prints no final stats: take the last status line
    runs="$(grep -oE '^#[0-9]+' "$scratch/log" | tail -1 | tr -d '#')"
    [[ -n "$runs" ]] && rate="$((runs / (secs > 0 ? secs : 1)))"
  fi
  files="$(find "$scratch/corpus" -type f | wc -l)"
  if compgen -G "$scratch/artifacts/*" >/dev/null; then
    found="$(cd "$scratch/artifacts" && ls | tr '\n' ' ')"
    [[ "$status" -eq 0 ]] && status=1  # -ignore_crashes: a saved input is still a failure
  fi
  if [[ "$status" -eq 0 ]]; then
    echo "$t: OK ${runs:-?} executions in ${secs} s (${rate:-?} exec/s), corpus ${files} inputs"
  else
    echo "$t: FAILED (status $status) after ${runs:-?} executions (${rate:-?} exec/s), corpus ${files} inputs; log:"
    grep -E "ERROR|SUMMARY|FUZZ CHECK|Test unit written|runtime error|deadly signal|leak|timeout|out-of-memory|what\(\)" \
      "$scratch/log" | sort | uniq -c | sort -rn | head -20 | sed 's/^/  /'
    mkdir -p "$BUILD/findings/$t"
    cp "$scratch/log" "$BUILD/findings/$t.log"
    if [[ -n "$found" ]]; then
      cp "$scratch/artifacts/"* "$BUILD/findings/$t/"
      echo "  input(s) saved to $BUILD/findings/$t/: $found"
      echo "  reproduce: $exe $BUILD/findings/$t/<file>"
    fi
    echo "  full log: $BUILD/findings/$t.log"
  fi
  if [[ -n "${STRATA_FUZZ_CORPUS_OUT:-}" ]]; then
    mkdir -p "$STRATA_FUZZ_CORPUS_OUT"
    cp -r "$scratch/corpus/." "$STRATA_FUZZ_CORPUS_OUT/"
  fi
  rm -rf "$scratch"
  return "$status"
}

[[ $# -ge 1 ]] || usage
case "$1" in
  --list)
    printf '%s\n' "${TARGETS[@]}"
    ;;
  --build)
    build "${TARGETS[@]}"
    ;;
  --smoke)
    [[ $# -eq 2 && "$2" =~ ^[0-9]+$ ]] || usage
    start=$SECONDS
    build "${TARGETS[@]}"
    # One target per core at a time (each fuzzer is one process on one core); reports in list order.
    cores="$(nproc 2>/dev/null || echo 2)"
    echo "built in $((SECONDS - start)) s; fuzzing each target for $2 s, $cores at a time"
    reports="$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz-smoke.XXXXXX")"
    for t in "${TARGETS[@]}"; do
      while [[ $(jobs -rp | wc -l) -ge $cores ]]; do wait -n || true; done
      (if run "$t" "$2" > "$reports/$t.txt" 2>&1; then echo 0; else echo $?; fi > "$reports/$t.rc") &
    done
    wait
    failed=()
    for t in "${TARGETS[@]}"; do
      cat "$reports/$t.txt"
      [[ "$(cat "$reports/$t.rc" 2>/dev/null)" == 0 ]] || failed+=("$t")
    done
    rm -rf "$reports"
    echo "fuzz smoke: ${#TARGETS[@]} targets, $((SECONDS - start)) s in all"
    if [[ ${#failed[@]} -gt 0 ]]; then
      echo "fuzz smoke FAILED: ${failed[*]}"
      exit 1
    fi
    ;;
  -*)
    usage
    ;;
  *)
    [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage
    t="$1" secs="$2"
    shift 2
    max_len "$t" >/dev/null
    build "$t"
    run "$t" "$secs" "$@"
    ;;
esac
