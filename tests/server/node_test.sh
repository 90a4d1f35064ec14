#!/usr/bin/env bash
# Runs a Node test of strata serve (tests/server/*.mjs) against a freshly synthesized tiny checkpoint.
# Usage: node_test.sh [--browser=required|off] STRATA_BINARY SOURCE_DIR SCRIPT [ARGS...]
# Exit 77 (ctest: skipped) when Node or the npm packages are missing (scripts/install-deps.sh).
# --browser=required (a browser test): Debian's chromium and playwright-core must be there, else the
# test FAILS (install-deps.sh installs both, so CI never skips it); --browser=off (the developer
# configured -DSTRATA_BROWSER_TESTS=OFF): skipped, saying so. The script then gets the chromium
# path after the checkpoint.
set -euo pipefail
browser=""
if [[ "${1:-}" == --browser=* ]]; then browser="${1#--browser=}"; shift; fi
strata="$1"; src="$2"; script="$3"; shift 3
if [[ "$browser" == off ]]; then
  echo "SKIP: browser test off (configured with -DSTRATA_BROWSER_TESTS=OFF)"; exit 77
fi
command -v node >/dev/null 2>&1 || { echo "node_test.sh: node not found (scripts/install-deps.sh)"; exit 77; }
for pkg in openai @anthropic-ai/sdk; do
  [[ -f "$src/node_modules/$pkg/package.json" ]] || { echo "node_test.sh: $src/node_modules/$pkg missing (scripts/install-deps.sh)"; exit 77; }
done
browser_args=()
if [[ "$browser" == required ]]; then
  chromium="$(command -v chromium || true)"
  [[ -n "$chromium" ]] || { echo "node_test.sh: FAIL: chromium not found (scripts/install-deps.sh installs Debian's chromium; configure with -DSTRATA_BROWSER_TESTS=OFF to skip browser tests)"; exit 1; }
  [[ -f "$src/node_modules/playwright-core/package.json" ]] || { echo "node_test.sh: FAIL: $src/node_modules/playwright-core missing (npm ci, or scripts/install-deps.sh)"; exit 1; }
  browser_args=("$chromium")
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$strata" synth --preset tiny --out "$tmp/ckpt" >/dev/null
# Node resolves the SDKs from the script's directory upwards: run a copy inside the source tree's
# node_modules parent.
cd "$src"
exec node "$src/tests/server/$script" "$strata" "$tmp/ckpt" "${browser_args[@]}" "$@"
