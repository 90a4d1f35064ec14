# Shared helpers of the CLI checks (sourced; the caller sets $tmp to a scratch directory and $fail).

# expect_error NAME PATTERN -- command...: the command exits non-zero with exactly one stderr line,
# and that line matches PATTERN. Sets fail=1 and prints why otherwise.
expect_error() {
  local name="$1" pattern="$2"; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines; lines=$(wc -l <"$tmp/err")
  if [[ $rc -eq 0 ]]; then echo "FAIL $name: exit 0"; fail=1; return; fi
  if ! grep -q -- "$pattern" "$tmp/err"; then echo "FAIL $name: stderr lacks '$pattern':"; cat "$tmp/err"; fail=1; return; fi
  if [[ $lines -ne 1 ]]; then echo "FAIL $name: $lines lines on stderr, expected one:"; cat "$tmp/err"; fail=1; return; fi
  echo "ok   $name: $(cat "$tmp/err")"
}

# expect_usage NAME PATTERN -- command...: as expect_error, and the exit status is 2 (every usage
# error exits 2, whatever CLI11's own code for it).
expect_usage() {
  local name="$1" pattern="$2"; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL $name: exit $rc, expected 2 (usage error):"; cat "$tmp/err"; fail=1; return; fi
  expect_error "$name" "$pattern" -- "$@"
}
