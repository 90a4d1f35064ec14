#!/usr/bin/env bash
# Runs a Node test of strata serve (tests/server/*.mjs) against a freshly synthesized tiny checkpoint.
# Usage: node_test.sh STRATA_BINARY SOURCE_DIR SCRIPT [ARGS...]
# Exit 77 (ctest: skipped) when Node or the npm packages are missing (scripts/install-deps.sh).
set -euo pipefail
strata="$1"; src="$2"; script="$3"; shift 3
command -v node >/dev/null 2>&1 || { echo "node_test.sh: node not found (scripts/install-deps.sh)"; exit 77; }
for pkg in openai @anthropic-ai/sdk; do
  [[ -f "$src/node_modules/$pkg/package.json" ]] || { echo "node_test.sh: $src/node_modules/$pkg missing (scripts/install-deps.sh)"; exit 77; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$strata" synth --preset tiny --out "$tmp/ckpt" >/dev/null
# Node resolves the SDKs from the script's directory upwards: run a copy inside the source tree's
# node_modules parent.
cd "$src"
exec node "$src/tests/server/$script" "$strata" "$tmp/ckpt" "$@"
