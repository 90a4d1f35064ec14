#!/usr/bin/env bash
# Writes sample GGUFs with strata's writer (gguf_sample_writer) and parses them with the npm package
# @huggingface/gguf (tests/io/gguf_hf_test.mjs).
# Usage: gguf_node_test.sh GGUF_SAMPLE_WRITER SOURCE_DIR
# Exit 77 (ctest: skipped) when Node or the npm package is missing (npm ci in the source tree).
set -euo pipefail
writer="$1"; src="$2"
command -v node >/dev/null 2>&1 || { echo "gguf_node_test.sh: node not found (scripts/install-deps.sh)"; exit 77; }
[[ -f "$src/node_modules/@huggingface/gguf/package.json" ]] || {
  echo "gguf_node_test.sh: $src/node_modules/@huggingface/gguf missing (npm ci)"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$writer" "$tmp"
cd "$src"
node "$src/tests/io/gguf_hf_test.mjs" "$tmp"
