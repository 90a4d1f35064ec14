#!/usr/bin/env bash
# README command (a): install dependencies, build, synthesize the demo checkpoint on first use, then
# answer a question about a bundled public-domain document with `strata run`.
# The demo weights are RANDOM: the pipeline and the speed are real, the answer text is not.
# Extra arguments go to `strata run` (e.g. -n 64 --temp 0).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
t0=$SECONDS
# Everything but the answer goes to stderr, so `scripts/demo.sh > answer.txt` keeps the text alone.
scripts/install-deps.sh >&2
# Only the CLI: the tests and benchmarks double the first build (scripts/test.sh builds them).
scripts/build.sh "$repo_root/build" -- strata >&2
demo="$repo_root/data/demo"
if [[ ! -f "$demo/config.json" ]]; then
  echo "demo.sh: synthesizing the 0.46 GB demo checkpoint into $demo (first use only, a few seconds)" >&2
  build/cli/strata synth --preset demo --out "$demo" --force >&2
fi
echo "demo.sh: ready after $((SECONDS - t0)) s; running strata run on the demo checkpoint (random weights)" >&2
exec build/cli/strata run -m "$demo" \
  -f data/docs/gettysburg-address.txt \
  -p "Question: According to the speaker, who consecrated the ground at Gettysburg, and what task remains for the living?" \
  -n 96 "$@"
