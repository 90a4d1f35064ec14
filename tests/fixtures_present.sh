#!/usr/bin/env bash
# The golden fixtures are outside the repository (-DSTRATA_FIXTURES_DIR, default ../shared/fixtures).
# Without them every fixture test reports SKIPPED, and ctest then headlines "100% tests passed".
# This test fails instead, saying how many fixture tests did not check anything and why, so that
# `ctest -L fixture` on a clone without the fixtures cannot read as a pass. Without the fixtures,
# run `ctest -LE fixture`.
# Usage: fixtures_present.sh FIXTURES_DIR BUILD_DIR
set -uo pipefail
fixtures="$1"; build="$2"
need=(v41-tiny/manifest.json v41-tiny/checkpoint/config.json real-config/config.json chat tokenizer)
missing=()
for n in "${need[@]}"; do [[ -e "$fixtures/$n" ]] || missing+=("$n"); done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "ok   golden fixtures present at $fixtures (${need[*]})"
  exit 0
fi
# The fixture-labelled tests, this one excluded.
n="$(ctest --test-dir "$build" -N -L fixture 2>/dev/null | grep -c '^ *Test *#')"
n=$((n > 0 ? n - 1 : 0))
echo "FAIL golden fixtures missing at $fixtures: ${missing[*]}"
echo "     the other $n tests labelled 'fixture' skip their fixture cases (not passed): those checked nothing."
echo "     Get the fixtures (-DSTRATA_FIXTURES_DIR=DIR), or run the rest with: ctest -LE fixture"
exit 1
